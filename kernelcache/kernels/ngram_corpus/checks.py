"""The bad-input contract of the n-gram corpus: token conversion (Python lists / NumPy arrays ->
int32 CSR), integer arguments, and the external-corpus reader (JSONL documents -> token chunks).

Kept apart from the call path because every call converts its input here first; the rules
(int32 range, integer dtypes only, clear TypeErrors) are the bad-input contract of the API.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from numbers import Integral
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np

SEPARATOR_TOKEN = -(2**31)
DEFAULT_CHUNK_SIZE = 4096
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# -- input conversion -------------------------------------------------------------------------
_OVERFLOW_MSG = "value cannot be converted to type int32 without overflow"


def _check_int32(arr: np.ndarray) -> np.ndarray:
    """int64/any-int array -> contiguous int32 array; out-of-range -> RuntimeError (as the reference)."""
    if arr.size and (int(arr.min()) < INT32_MIN or int(arr.max()) > INT32_MAX):
        raise RuntimeError(_OVERFLOW_MSG)
    return np.ascontiguousarray(arr, dtype=np.int32)


def _array_tokens(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.int32:
        return np.ascontiguousarray(a.reshape(-1))
    if a.dtype.kind not in "iub":
        raise TypeError(f"token arrays must have an integer dtype, got {a.dtype}")
    if a.dtype.kind == "u" and a.size and int(a.max()) > INT32_MAX:
        raise RuntimeError(_OVERFLOW_MSG)
    return _check_int32(a.reshape(-1).astype(np.int64, copy=False))


def _iter_tokens(it: Iterable[Any], count: int) -> np.ndarray:
    """Python ints -> int32 array in one pass (NumPy raises OverflowError outside int32)."""
    try:
        return np.fromiter(it, dtype=np.int32, count=count)
    except OverflowError:
        raise RuntimeError(_OVERFLOW_MSG) from None
    except (ValueError, TypeError) as e:
        raise TypeError(f"tokens must be integers ({e})") from None


def token_array(seq: Any) -> np.ndarray:
    """One token sequence -> int32 array."""
    if isinstance(seq, np.ndarray):
        if seq.ndim != 1:
            raise TypeError("a token sequence must be 1-D")
        return _array_tokens(seq)
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"a token sequence must be a list of ints, got {type(seq).__name__}")
    return _iter_tokens(seq, len(seq))


def to_csr(batch_tokens: Any) -> Tuple[np.ndarray, np.ndarray, List[int]]:
    """List of token sequences -> (flat int32 tokens, int64 offsets [n+1], lengths)."""
    if isinstance(batch_tokens, np.ndarray):
        if batch_tokens.ndim != 2:
            raise TypeError("batch_tokens as an array must be 2-D (requests x tokens)")
        n, w = batch_tokens.shape
        return _array_tokens(batch_tokens), np.arange(n + 1, dtype=np.int64) * w, [w] * n
    if isinstance(batch_tokens, (list, tuple)):
        seqs = batch_tokens
    elif isinstance(batch_tokens, (str, bytes, dict)) or not isinstance(batch_tokens, Iterable):
        raise TypeError(f"batch_tokens must be a list of token lists, got {type(batch_tokens).__name__}")
    else:
        seqs = list(batch_tokens)
    n = len(seqs)
    try:
        lens = [len(s) for s in seqs]
    except TypeError:
        raise TypeError("batch_tokens must be a list of token lists") from None
    offsets = np.fromiter(itertools.accumulate(lens, initial=0), dtype=np.int64, count=n + 1)
    if n == 0:
        return np.zeros(0, dtype=np.int32), offsets, lens
    kinds = {type(s) for s in seqs}
    if kinds <= _PLAIN_SEQS:
        flat = _iter_tokens(itertools.chain.from_iterable(seqs), int(offsets[-1]))
    else:
        parts = [token_array(s) for s in seqs]  # type checks per sequence (str, ndim, dtype)
        flat = np.concatenate(parts) if n > 1 else parts[0]
    return flat, offsets, lens


_PLAIN_SEQS = frozenset({list, tuple, range})


def as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def iter_external_corpus_chunks(
    path: Any, tokenizer: Any, max_tokens: int, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[List[int]]:
    """Token chunks of a JSONL corpus (one JSON string per line), separator before each document
    but the first; raises ValueError past ``max_tokens`` (tokens + separators)."""
    if tokenizer is None:
        raise ValueError("A tokenizer is required to load an external ngram corpus")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, Integral) or max_tokens <= 0:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"External corpus file not found: {path}")
    return _iter_chunks(p, tokenizer, int(max_tokens), int(chunk_size))


def _iter_chunks(p: Path, tokenizer: Any, max_tokens: int, chunk_size: int) -> Iterator[List[int]]:
    total = 0
    first = True
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: invalid JSON ({e})") from None
            if not isinstance(doc, str):
                raise ValueError(f"{p}:{lineno}: every line must be a JSON string, got {type(doc).__name__}")
            toks = list(tokenizer.encode(doc, add_special_tokens=False))
            if not toks:
                continue
            if not first:
                toks.insert(0, SEPARATOR_TOKEN)
            if total + len(toks) > max_tokens:
                raise ValueError(
                    f"External corpus {p} exceeds the configured token limit of {max_tokens} tokens"
                )
            total += len(toks)
            first = False
            for i in range(0, len(toks), chunk_size):
                yield toks[i : i + chunk_size]
