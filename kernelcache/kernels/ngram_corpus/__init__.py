"""N-gram corpus: the draft proposer for n-gram speculative decoding.

Python API compatible with SGLang 0.5.23's ``NgramCorpus`` (see ``docs/ngram_corpus.md`` for
usage and for every deliberate difference). ``spec``: what the kernel is; ``checks``: the
bad-input contract (token conversion, the external-corpus reader); ``call``: the native module
and ``NgramCorpus``. Importing this package builds nothing.
"""
from .call import DEFAULT_MAX_MATCH_STATES, MAX_DRAFT_TOKEN_NUM, NgramCorpus
from .checks import DEFAULT_CHUNK_SIZE, SEPARATOR_TOKEN, iter_external_corpus_chunks
from .spec import FUNCTIONS, KERNEL_NAME, spec

__all__ = [
    "NgramCorpus",
    "iter_external_corpus_chunks",
    "spec",
    "SEPARATOR_TOKEN",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_MATCH_STATES",
    "MAX_DRAFT_TOKEN_NUM",
    "FUNCTIONS",
    "KERNEL_NAME",
]
