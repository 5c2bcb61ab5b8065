"""This machine: compilers and tool identities, GPUs, the CPU, installed and system packages,
path anchors, directory trust, and the one stat rule the warm paths compare by.
"""
