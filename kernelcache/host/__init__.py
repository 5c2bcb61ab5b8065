"""This machine: compilers and tool identities, GPUs, the CPU, installed and system packages,
path anchors and directory trust.
"""
