"""Arm/disarm the ``tvm_ffi`` drop-in's import hook (kept for callers of the old module;
the hook itself is :mod:`kernelcache.patch`'s, shared by every drop-in)."""
from __future__ import annotations

TARGET = "tvm_ffi.cpp"


def arm() -> None:
    """Install the drop-in now if ``tvm_ffi.cpp`` is loaded, else when it gets imported."""
    from ..patch import arm as _arm

    _arm("tvm_ffi")


def disarm() -> None:
    from ..patch import disarm as _disarm

    _disarm("tvm_ffi")
