"""The write side for other hosts: artifact roots and companion wheels, the locked set, OCI layouts.
"""
