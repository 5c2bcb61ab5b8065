"""The patch registry: which drop-ins exist, what each patches, and how their names are spelled.

A leaf (imports nothing of kernelcache), and not inside :mod:`kernelcache.patch`: importing a
module of that package runs its ``__init__`` (the switch and the import hook), and ``settings``,
which parses ``KERNELCACHE_PATCH`` with this registry, sits below the switch.
"""
from __future__ import annotations

from typing import Iterable

# name -> (the module it patches, the kernelcache module that does it); registry order is the
# order drop-ins are reported and installed in.
REGISTRY: dict[str, tuple[str, str]] = {
    "tvm_ffi": ("tvm_ffi.cpp", "kernelcache.tvm_ffi"),
    "torch": ("torch.utils.cpp_extension", "kernelcache.cpp_extension"),
    "flashinfer": ("flashinfer.jit.core", "kernelcache.flashinfer"),
    "sglang": ("sglang.kernels.jit.utils.compile.loader", "kernelcache.sglang"),
}
_ALL = ("all", "1", "true", "yes", "on")
_NONE = ("0", "false", "no", "off", "")


def parse(value: "str | Iterable[str] | None", name: str = "KERNELCACHE_PATCH") -> tuple[str, ...]:
    """``"tvm_ffi,torch"`` / ``"all"`` / a sequence of names -> the drop-ins, in registry order.

    Comma or space separated; ``all`` means every drop-in; ``0``/``off``/empty means none; an
    unknown name is a ``ValueError`` naming the known ones (a typo must not silently patch nothing).
    """
    items = value.replace(",", " ").split() if isinstance(value, str) else [str(v) for v in value or ()]
    chosen: set[str] = set()
    for item in (i.strip().lower().replace("-", "_") for i in items):
        if item in _ALL:
            chosen.update(REGISTRY)
        elif item in REGISTRY:
            chosen.add(item)
        elif item not in _NONE:
            raise ValueError(f"{name}: unknown drop-in {item!r}; known: {', '.join(REGISTRY)} (or all)")
    return tuple(t for t in REGISTRY if t in chosen)
