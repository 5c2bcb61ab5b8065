"""Randomized stateful tests: the native NgramCorpus against the pure-Python reference model.

Each scenario drives both with the same call sequence (inserts, stateless and incremental
lookups, erase, reset, loading/removing 0-3 external corpora) and compares ids and masks
element for element. Tiny capacities force eviction; vocabularies include 0, negative ids and
the separator value.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

pytestmark = [pytest.mark.kernel("ngram_corpus"), pytest.mark.suite("kernels-cpu", "cpu")]

from . import ngram_reference as R  # noqa: E402

from kernelcache.kernels.ngram_corpus import SEPARATOR_TOKEN, NgramCorpus  # noqa: E402


def _config(rng: random.Random) -> dict:
    D = rng.randint(2, 7)
    bmin = rng.randint(1, 4)
    bmax = rng.randint(bmin, 6)
    d = rng.choice([1, 2, 3, 4, 6, 8, 12])
    return dict(
        max_trie_depth=D,
        min_bfs_breadth=bmin,
        max_bfs_breadth=bmax,
        draft_token_num=d,
        match_type=rng.choice(["BFS", "PROB"]),
        capacity=rng.choice([D + 1, D + 2, D + 5, 20, 60, 100_000]),
        external_sam_budget=rng.choice([0, 1, 2, d - 1, d + 3]),
    )


def _vocab(rng: random.Random) -> list[int]:
    base = rng.choice([3, 6, 12, 40])
    toks = list(range(1, base + 1))
    if rng.random() < 0.5:
        toks += [0, -1, -7, 2**31 - 1]
    return toks


def _check(native: NgramCorpus, ref: R.RefCorpus, rids, tails, totals, ctx) -> None:
    ids, mask = native.batch_get(rids, tails, totals)
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    rids_ref, rmask = ref.get(tails)
    assert ids.tolist() == rids_ref, ctx
    assert mask.tolist() == rmask, ctx


def _scenario(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    cfg = _config(rng)
    native = NgramCorpus(**cfg)
    ref = R.RefCorpus(**cfg)
    vocab = _vocab(rng)
    D = cfg["max_trie_depth"]

    def seq(lo: int, hi: int) -> list[int]:
        return [rng.choice(vocab) for _ in range(rng.randint(lo, hi))]

    # live requests: req id -> full history
    reqs: dict[str, list[int]] = {}
    n_corpora = 0
    for step in range(steps):
        op = rng.random()
        ctx = (seed, step, cfg)
        if op < 0.35:
            batch = [seq(0, 3 * D) for _ in range(rng.randint(1, 4))]
            native.batch_put(batch)
            native.synchronize()
            ref.put(batch)
        elif op < 0.55:  # stateless lookups (fresh ids)
            tails = [seq(1, D + 3) for _ in range(rng.randint(1, 4))]
            rids = [f"fresh-{seed}-{step}-{i}" for i in range(len(tails))]
            _check(native, ref, rids, tails, [len(t) for t in tails], ctx)
            native.erase_match_state(rids)
        elif op < 0.85:  # incremental requests (same ids, growing histories)
            if not reqs or rng.random() < 0.3:
                reqs[f"req-{len(reqs)}"] = seq(1, D + 2)
            rids, tails, totals = [], [], []
            for rid in rng.sample(sorted(reqs), k=min(len(reqs), rng.randint(1, 3))):
                hist = reqs[rid]
                hist += seq(0, 3)
                cut = D if rng.random() < 0.8 else rng.randint(1, D + 2)
                tails.append(hist[-cut:])
                totals.append(len(hist) if rng.random() < 0.9 else rng.randint(0, len(hist) + 2))
                rids.append(rid)
                if rng.random() < 0.3:  # the worker inserts the request's last window
                    native.batch_put([hist[-D:]])
                    native.synchronize()
                    ref.put([hist[-D:]])
            _check(native, ref, rids, tails, totals, ctx)
        elif op < 0.90:
            if reqs:
                gone = rng.choice(sorted(reqs))
                native.erase_match_state([gone, "never-seen"])
                del reqs[gone]
        elif op < 0.93:
            native.reset()
            ref.reset()
        else:
            if n_corpora < 3 and (rng.random() < 0.7 or not ref.list_corpora()):
                cid = f"corpus-{seed}-{step}"
                docs = [seq(1, 12) for _ in range(rng.randint(1, 3))]
                chunks = [([SEPARATOR_TOKEN] if i else []) + doc for i, doc in enumerate(docs)]
                n = native.load_external_corpus_named(cid, chunks)
                native.commit_external_corpus_load(cid, n)
                assert n == ref.add_corpus(cid, [t for c in chunks for t in c])
                n_corpora += 1
            elif ref.list_corpora():
                cid = rng.choice(sorted(ref.list_corpora()))
                native.remove_external_corpus(cid)
                ref.remove_corpus(cid)
                n_corpora -= 1
            assert list(native.list_external_corpora().items()) == list(ref.list_corpora().items())


@pytest.mark.parametrize("seed", range(150))
def test_random_against_reference(seed: int) -> None:
    _scenario(seed, steps=60)


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_random_eviction_heavy(match_type: str) -> None:
    """Tiny pools, long sequences, many lookups: eviction on almost every window."""
    rng = random.Random(1234 if match_type == "BFS" else 4321)
    for _ in range(6):
        D = rng.randint(2, 6)
        cfg = dict(max_trie_depth=D, min_bfs_breadth=1, max_bfs_breadth=rng.randint(1, 5),
                   draft_token_num=rng.choice([3, 5, 8]), match_type=match_type,
                   capacity=D + rng.randint(1, 12))
        native, ref = NgramCorpus(**cfg), R.RefCorpus(**cfg)
        for step in range(30):
            batch = [[rng.randint(1, 5) for _ in range(rng.randint(1, 20))] for _ in range(2)]
            native.batch_put(batch)
            native.synchronize()
            ref.put(batch)
            tails = [[rng.randint(1, 5) for _ in range(rng.randint(1, D + 1))] for _ in range(3)]
            _check(native, ref, ["a", "b", "c"], tails, [len(t) for t in tails], (cfg, step))
            assert native.memory_stats()["num_nodes"] <= cfg["capacity"] - 1
