"""What the n-gram corpus kernel is: its sources, exported functions and KernelSpec.

Kept apart from the call path so the CLI, the pytest plugin and ``kernelcache build`` can name
and build the kernel without importing NumPy-heavy call code.
"""
from __future__ import annotations

from pathlib import Path

from ...base.settings import Settings
from ...base.spec import KernelSpec

KERNEL_NAME = "ngram_corpus"
CSRC = Path(__file__).resolve().parents[2] / "csrc"
SOURCES = (
    "ngram_corpus/trie.cc",
    "ngram_corpus/sam.cc",
    "ngram_corpus/draft.cc",
    "ngram_corpus/corpus.cc",
    "ngram_corpus/ngram_corpus_ffi.cc",
)
#: expected tvm-ffi schemas of the exported functions (checked by the loader)
FUNCTIONS = {
    "ngram_corpus_create": "Callable[[int, int, int, int, int, int, int], Object]",
}


def spec(settings: Settings | None = None) -> KernelSpec:
    """The KernelSpec of the native n-gram corpus module.

    ``settings`` is accepted like every shipped kernel's ``spec`` (the CLI and the plugin pass
    theirs); no setting changes this one (it needs no headers from outside the package).
    """
    return KernelSpec(
        name=KERNEL_NAME,
        sources=list(SOURCES),
        root=CSRC,
        include_dirs=["ngram_corpus"],
        cflags=["-std=c++20", "-O3"],
        functions=dict(FUNCTIONS),
        backend="cpu",
    )
