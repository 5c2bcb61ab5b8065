"""The payload: production kernels built through the cache layer.

Each kernel lives in its own module, which defines ``spec() -> KernelSpec`` and its Python API.
Imports are lazy so ``import kernelcache.kernels`` costs nothing until a kernel is used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import UnknownKernel
from ..spec import KernelSpec

# kernel name (KernelSpec.name) -> module that defines spec()
_KERNEL_MODULES: dict[str, str] = {
    "ngram_corpus": "kernelcache.kernels.ngram_corpus",
    "tree_speculative_sampling": "kernelcache.kernels.speculative_sampling",
}

_LAZY_ATTRS: dict[str, str] = {
    "NgramCorpus": "kernelcache.kernels.ngram_corpus",
    "iter_external_corpus_chunks": "kernelcache.kernels.ngram_corpus",
    "tree_speculative_sampling_target_only": "kernelcache.kernels.speculative_sampling",
}

__all__ = ["shipped_specs", "shipped_kernel_names", *_LAZY_ATTRS]

if TYPE_CHECKING:  # pragma: no cover
    from .ngram_corpus import NgramCorpus, iter_external_corpus_chunks
    from .speculative_sampling import tree_speculative_sampling_target_only


def shipped_kernel_names() -> list[str]:
    return sorted(_KERNEL_MODULES)


def shipped_specs(names: list[str] | None = None) -> dict[str, KernelSpec]:
    """KernelSpecs of the shipped kernels (all, or the given names), keyed by name."""
    wanted = shipped_kernel_names() if names is None else list(names)
    for n in wanted:
        if n not in _KERNEL_MODULES:
            raise UnknownKernel(n, shipped_kernel_names())
    return {n: importlib.import_module(_KERNEL_MODULES[n]).spec() for n in wanted}


def __getattr__(name: str) -> Any:
    mod = _LAZY_ATTRS.get(name)
    if mod is None:
        raise AttributeError(f"module 'kernelcache.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
