"""CI scripts of this repository (not part of the kernelcache distribution)."""
