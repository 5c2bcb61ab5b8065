"""What an entry is keyed by: the exact command lines (plan), the level-1 key, the toolchain-free
source key and the recorded dependencies (level 2).
"""
