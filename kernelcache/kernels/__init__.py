"""The payload: production kernels built through the cache layer.

Each kernel is a package of the same shape: ``spec`` (what it is: arguments, exported
functions, ``spec(settings=None) -> KernelSpec``), ``checks`` (its bad-input contract) and
``call`` (the loaded module and the Python API). Kernels load with the settings given to
:func:`configure` (default: the loader's), so ``load(spec, settings=s)`` and a shipped kernel's
Python API agree on cache, prebuilt roots and fleet. Imports are lazy: ``import
kernelcache.kernels`` costs nothing until a kernel is used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..base.errors import UnknownKernel
from ..base.settings import Settings
from ..base.spec import KernelSpec
from .config import configure, configured

# kernel name (KernelSpec.name) -> package whose spec module defines spec(settings)
KERNEL_PACKAGES: dict[str, str] = {
    "ngram_corpus": "kernelcache.kernels.ngram_corpus",
    "tree_speculative_sampling": "kernelcache.kernels.speculative_sampling",
}

LAZY_ATTRS: dict[str, str] = {
    "NgramCorpus": "kernelcache.kernels.ngram_corpus",
    "iter_external_corpus_chunks": "kernelcache.kernels.ngram_corpus",
    "tree_speculative_sampling_target_only": "kernelcache.kernels.speculative_sampling",
}

__all__ = ["shipped_specs", "shipped_kernel_names", "configure", "configured", *LAZY_ATTRS]

if TYPE_CHECKING:  # pragma: no cover
    from .ngram_corpus import NgramCorpus, iter_external_corpus_chunks
    from .speculative_sampling import tree_speculative_sampling_target_only


def shipped_kernel_names() -> list[str]:
    return sorted(KERNEL_PACKAGES)


def shipped_specs(names: list[str] | None = None, settings: Settings | None = None) -> dict[str, KernelSpec]:
    """KernelSpecs of the shipped kernels (all, or the given names), keyed by name, for
    ``settings`` (default: :func:`configure`'s, else the loader's default)."""
    wanted = shipped_kernel_names() if names is None else list(names)
    for n in wanted:
        if n not in KERNEL_PACKAGES:
            raise UnknownKernel(n, shipped_kernel_names())
    return {n: importlib.import_module(KERNEL_PACKAGES[n] + ".spec").spec(settings) for n in wanted}


def __getattr__(name: str) -> Any:
    mod = LAZY_ATTRS.get(name)
    if mod is None:
        raise AttributeError(f"module 'kernelcache.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
