"""The call path of the n-gram corpus: the native module and ``NgramCorpus`` on top of it.

The native core (C++ under ``kernelcache/csrc/ngram_corpus``) is built and loaded through
``kernelcache.load`` (with ``kernelcache.kernels.configure``'s settings) on the first
``NgramCorpus`` construction; importing this module builds nothing.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Dict, List, Tuple

import numpy as np

from ...base import process_state
from .. import config
from .checks import INT32_MAX, as_int, to_csr, token_array
from .spec import spec

logger = logging.getLogger(__name__)

#: Per-request match states kept at most (least recently used ones are dropped first; a dropped
#: state only costs one full re-match, results are unaffected).
DEFAULT_MAX_MATCH_STATES = 65536
#: Largest accepted draft_token_num (the mask alone is d*d int64 per request).
MAX_DRAFT_TOKEN_NUM = 4096
MATCH_TYPES = {"BFS": 0, "PROB": 1}


class Native:
    """The loaded native module of this process (None until the first NgramCorpus)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.module: Any = None

    def get(self) -> Any:
        mod = self.module
        if mod is None:
            with self.lock:
                if self.module is None:
                    import kernelcache

                    settings = config.configured()
                    self.module = kernelcache.load(spec(settings), settings=settings)
                mod = self.module
        return mod

    def reset(self) -> None:
        with self.lock:
            self.module = None


native = Native()
process_state.register("kernels.ngram_corpus.native", native.reset)


class NgramCorpus:
    """Trie of recent n-grams (+ optional external suffix automata) proposing draft trees.

    Compatible with SGLang 0.5.23's ``NgramCorpus`` (same constructor keywords, defaults, methods
    and outputs); ``max_match_states`` bounds the per-request incremental states (LRU).
    """

    def __init__(
        self,
        max_trie_depth: int = 18,
        min_bfs_breadth: int = 1,
        max_bfs_breadth: int = 8,
        draft_token_num: int = 8,
        match_type: str = "BFS",
        capacity: int = 1_000_000,
        external_sam_budget: int = 0,
        external_corpus_max_tokens: int = 10_000_000,
        *,
        max_match_states: int = DEFAULT_MAX_MATCH_STATES,
    ) -> None:
        D = as_int("max_trie_depth", max_trie_depth)
        bmin = as_int("min_bfs_breadth", min_bfs_breadth)
        bmax = as_int("max_bfs_breadth", max_bfs_breadth)
        d = as_int("draft_token_num", draft_token_num)
        cap = as_int("capacity", capacity)
        sam_budget = as_int("external_sam_budget", external_sam_budget)
        max_tokens = as_int("external_corpus_max_tokens", external_corpus_max_tokens)
        max_states = as_int("max_match_states", max_match_states)
        if not isinstance(match_type, str) or match_type not in MATCH_TYPES:
            raise ValueError(f"match_type must be 'BFS' or 'PROB', got {match_type!r}")
        if D <= 1:
            raise RuntimeError(f"max_trie_depth must be greater than 1, got {D}")
        if bmin <= 0:
            raise RuntimeError(f"min_bfs_breadth must be greater than 0, got {bmin}")
        if bmin > bmax:
            raise RuntimeError(
                f"min_bfs_breadth must be less than or equal to max_bfs_breadth, got {bmin} > {bmax}"
            )
        if d <= 0:
            raise RuntimeError(f"draft_token_num must be greater than 0, got {d}")
        if d > MAX_DRAFT_TOKEN_NUM:
            raise ValueError(f"draft_token_num must be <= {MAX_DRAFT_TOKEN_NUM}, got {d}")
        for name, v in (("max_trie_depth", D), ("max_bfs_breadth", bmax), ("external_sam_budget", sam_budget)):
            if v > INT32_MAX:
                raise ValueError(f"{name} is too large: {v}")
        if cap <= D:
            raise ValueError(
                f"capacity ({cap}) must be greater than max_trie_depth ({D}): the root takes one "
                "node and every window of up to max_trie_depth tokens must fit in the pool"
            )
        if cap > INT32_MAX - 1:
            raise ValueError(f"capacity must be at most {INT32_MAX - 1}, got {cap}")
        if sam_budget < 0:
            raise ValueError(f"external_sam_budget must be >= 0, got {sam_budget}")
        if max_states < 1:
            raise ValueError(f"max_match_states must be >= 1, got {max_states}")

        self.max_trie_depth = D
        self.min_bfs_breadth = bmin
        self.max_bfs_breadth = bmax
        self.draft_token_num = d
        self.match_type = match_type
        self.capacity = cap
        self.external_sam_budget = sam_budget
        self.external_corpus_max_tokens = max_tokens
        self.max_match_states = max_states
        self._obj = native.get().ngram_corpus_create(D, bmin, bmax, d, MATCH_TYPES[match_type], cap, sam_budget)
        self._lock = threading.Lock()  # req-id map + the native calls that use state ids
        self._req_to_state: "OrderedDict[Any, int]" = OrderedDict()
        self._next_state_id = 0
        self._committed: Dict[str, int] = {}

    # -- trie -----------------------------------------------------------------------------------
    def batch_put(self, batch_tokens: List[List[int]]) -> None:
        """Queue sequences for insertion (asynchronous; see synchronize())."""
        flat, offsets, _ = to_csr(batch_tokens)
        self._obj.async_insert(flat, offsets)

    def synchronize(self) -> None:
        """Block until every sequence queued so far is in the trie."""
        self._obj.synchronize()

    def reset(self) -> None:
        """Empty the trie and forget all match states; inserts still queued are dropped."""
        with self._lock:
            self._obj.reset()
            self._req_to_state.clear()

    def erase_match_state(self, req_ids: List[str]) -> None:
        if isinstance(req_ids, (str, bytes)):
            raise TypeError("req_ids must be a list of request ids")
        with self._lock:
            sids = [self._req_to_state.pop(r) for r in req_ids if r in self._req_to_state]
            if sids:
                self._obj.erase_match_state(np.asarray(sids, dtype=np.int64))

    def batch_get(
        self, req_ids: List[str], batch_tokens: List[List[int]], total_lens: List[int]
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Draft trees for a batch: (ids int64[n*d], mask int64[n*d*d])."""
        if isinstance(req_ids, (str, bytes)) or not hasattr(req_ids, "__len__"):
            raise TypeError("req_ids must be a list of request ids")
        if not hasattr(total_lens, "__len__"):
            raise TypeError("total_lens must be a list of ints")
        if not hasattr(batch_tokens, "__len__"):
            raise TypeError("batch_tokens must be a list of token lists")
        n = len(batch_tokens)
        if len(req_ids) != n or len(total_lens) != n:
            raise ValueError(
                "req_ids, batch_tokens and total_lens must have the same length, got "
                f"{len(req_ids)}, {n}, {len(total_lens)}"
            )
        d = self.draft_token_num
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        flat, offsets, lens = to_csr(batch_tokens)
        if n != len(lens):
            raise ValueError("batch_tokens has an unexpected shape")
        if 0 in lens:
            raise RuntimeError("batchMatch received an empty token tail")
        if isinstance(total_lens, np.ndarray):
            if total_lens.dtype.kind not in "iu":
                raise TypeError("total_lens must be integers")
            tl = np.ascontiguousarray(total_lens, dtype=np.int64).reshape(-1)
        else:
            try:
                tl = np.fromiter(total_lens, dtype=np.int64, count=n)
            except (TypeError, ValueError, OverflowError) as e:
                raise TypeError(f"total_lens must be a list of ints ({e})") from None
        ids = np.empty(n * d, dtype=np.int64)
        mask = np.empty(n * d * d, dtype=np.int64)
        with self._lock:
            m = self._req_to_state
            sids = []
            for rid in req_ids:
                sid = m.get(rid)
                if sid is None:
                    sid = self._next_state_id
                    self._next_state_id += 1
                    m[rid] = sid
                else:
                    m.move_to_end(rid)
                sids.append(sid)
            self._obj.batch_match(np.asarray(sids, dtype=np.int64), flat, offsets, tl, ids, mask)
            if len(m) > self.max_match_states:
                evicted = [m.popitem(last=False)[1] for _ in range(len(m) - self.max_match_states)]
                self._obj.erase_match_state(np.asarray(evicted, dtype=np.int64))
        return ids, mask

    # -- external corpora -----------------------------------------------------------------------
    @property
    def remaining_token_budget(self) -> int:
        return self.external_corpus_max_tokens - sum(self._committed.values())

    def load_external_corpus_named(self, corpus_id: str, chunks: Iterable[Sequence[int]]) -> int:
        """Build a suffix automaton over the chunks and publish it as ``corpus_id``.

        Returns the number of tokens consumed (separators included). Call
        ``commit_external_corpus_load`` afterwards for the budget bookkeeping.
        """
        if not isinstance(corpus_id, str):
            raise TypeError(f"corpus_id must be a str, got {type(corpus_id).__name__}")
        if corpus_id in self._committed:
            raise ValueError(f"External corpus '{corpus_id}' already exists; remove it before loading it again")
        remaining = self.remaining_token_budget
        parts: List[np.ndarray] = []
        total = 0
        for chunk in chunks:
            arr = token_array(chunk)
            if total + len(arr) > remaining:
                raise ValueError(
                    f"External ngram corpus exceeds the remaining token budget ({remaining} tokens left of "
                    f"{self.external_corpus_max_tokens})"
                )
            if len(arr):
                parts.append(arr)
                total += len(arr)
        if total == 0:
            raise RuntimeError("External corpus is empty: no tokens were provided")
        tokens = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return int(self._obj.add_external_corpus(corpus_id, tokens))

    def commit_external_corpus_load(self, corpus_id: str, loaded_token_count: int) -> None:
        self._committed[corpus_id] = as_int("loaded_token_count", loaded_token_count)

    def remove_external_corpus(self, corpus_id: str) -> None:
        if not isinstance(corpus_id, str):
            raise TypeError(f"corpus_id must be a str, got {type(corpus_id).__name__}")
        self._obj.remove_external_corpus(corpus_id)
        self._committed.pop(corpus_id, None)

    def list_external_corpora(self) -> Dict[str, int]:
        flat = list(self._obj.list_external_corpora())
        return {str(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    # -- introspection --------------------------------------------------------------------------
    def memory_stats(self) -> Dict[str, float]:
        """Trie pool figures: nodes in use, capacity, bytes per pool node, reserved bytes."""
        return {
            "num_nodes": int(self._obj.num_nodes()),
            "capacity": self.capacity,
            "node_struct_bytes": int(self._obj.node_struct_bytes()),
            "bytes_per_node": float(self._obj.bytes_per_node()),
            "reserved_bytes": int(self._obj.reserved_bytes()),
            "match_states": int(self._obj.num_match_states()),
        }

    # -- helpers --------------------------------------------------------------------------------
    @staticmethod
    def leaf_paths_from_mask(tokens: Sequence[int], tree_mask: Any) -> List[List[int]]:
        """Root-to-leaf token paths of a draft tree given its tokens and tree mask."""
        toks = [int(t) for t in tokens]
        n = len(toks)
        m = np.asarray(tree_mask).reshape(n, n)
        kept: List[frozenset] = []
        rows: List[int] = []
        for i in range(n - 1, -1, -1):
            cols = frozenset(int(j) for j in np.nonzero(m[i])[0])
            if any(cols <= k for k in kept):
                continue
            kept.append(cols)
            rows.append(i)
        out = []
        for i in sorted(rows):
            out.append([toks[j] for j in range(n) if m[i][j]])
        return out

    def debug_result(self, ids: Any, masks: Any, tokenizer: Any = None) -> None:
        """Log the draft paths of a batch_get result (logging only)."""
        d = self.draft_token_num
        ids = np.asarray(ids).reshape(-1, d)
        masks = np.asarray(masks).reshape(-1, d, d)
        for b in range(ids.shape[0]):
            paths = self.leaf_paths_from_mask(ids[b].tolist(), masks[b])
            if tokenizer is not None:
                paths = [tokenizer.decode(p) for p in paths]
            logger.info("ngram draft %d: %s", b, paths)
