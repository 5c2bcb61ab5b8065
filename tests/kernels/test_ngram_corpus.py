"""Tests of the n-gram corpus kernel (issue 3; docs/specs/ngram_corpus.md).

Worked examples of §2.14, the behaviours of SGLang's unit tests (§3.1, classes 1-22), the §4
bug fixes, bad inputs, the insert-thread error path, thread safety and memory.
"""
from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.kernel("ngram_corpus"), pytest.mark.suite("kernels-cpu", "cpu")]

from . import ngram_reference as R  # noqa: E402

from kernelcache.kernels import NgramCorpus, iter_external_corpus_chunks  # noqa: E402
from kernelcache.kernels.ngram_corpus import (  # noqa: E402
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_MATCH_STATES,
    SEPARATOR_TOKEN,
)

CANON = [list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]]
CANON_MASK = ["10000000", "11000000", "10100000", "11010000", "10101000", "11010100", "10101010", "10101011"]


def make(external_corpus_documents=None, **kw) -> NgramCorpus:
    """The SGLang test helper's defaults: D=12, bmin=1, bmax=8, d=8, capacity=100000."""
    args = dict(max_trie_depth=12, min_bfs_breadth=1, max_bfs_breadth=8, draft_token_num=8,
                match_type="BFS", capacity=100_000, external_sam_budget=0,
                external_corpus_max_tokens=10_000_000)
    args.update(kw)
    c = NgramCorpus(**args)
    if external_corpus_documents is not None:
        chunks = [([SEPARATOR_TOKEN] if i else []) + list(doc) for i, doc in enumerate(external_corpus_documents)]
        n = c.load_external_corpus_named("test_corpus", chunks)
        c.commit_external_corpus_load("test_corpus", n)
    return c


def put(c: NgramCorpus, seqs) -> None:
    c.batch_put(seqs)
    c.synchronize()


def get(c: NgramCorpus, tails):
    """Stateless lookups (fresh request id per tail), reshaped to (n, d) and (n, d, d)."""
    d = c.draft_token_num
    ids, mask = c.batch_get([uuid.uuid4().hex for _ in tails], tails, [len(t) for t in tails])
    return ids.reshape(-1, d), mask.reshape(-1, d, d)


def rows(mask2d) -> list[str]:
    return ["".join(str(int(v)) for v in r) for r in mask2d]


def get1(c, tail, rid=None, total=None):
    d = c.draft_token_num
    ids, mask = c.batch_get([rid or uuid.uuid4().hex], [tail], [len(tail) if total is None else total])
    return ids.tolist(), rows(mask.reshape(d, d))


# ---------------------------------------------------------------------------------------------
# §2.14 worked examples and §3.1 classes 1-2
@pytest.mark.parametrize("match_type,first", [("BFS", [3, 4, 44, 5, 55, 6, 66, 77]),
                                              ("PROB", [3, 44, 4, 55, 5, 66, 6, 7])])
def test_canonical_corpus(match_type, first):
    c = make(match_type=match_type)
    put(c, CANON)
    ids, mask = get(c, [[1, 2, 3], [3, 44], [3, 6, 999]])
    assert ids.shape == (3, 8) and mask.shape == (3, 8, 8)
    assert ids.tolist() == [first, [44, 55, 66, 77, 88, 99, 100, 0], [999] + [0] * 7]
    assert rows(mask[0]) == CANON_MASK
    assert rows(mask[1])[-1] == "10000001"
    assert rows(mask[2]) == ["1" + "0" * 7] + ["1" + "0" * (i - 1) + "1" + "0" * (7 - i) for i in range(1, 8)]


def test_raw_outputs_are_flat_int64():
    c = make()
    put(c, CANON)
    ids, mask = c.batch_get(["a", "b"], [[1, 2, 3], [3, 44]], [3, 2])
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    assert ids.shape == (16,) and mask.shape == (128,)
    empty_ids, empty_mask = c.batch_get([], [], [])
    assert empty_ids.dtype == np.int64 and empty_ids.shape == (0,) and empty_mask.shape == (0,)


@pytest.mark.parametrize("match_type,times", [("BFS", 1), ("PROB", 10)])
def test_recency_vs_frequency(match_type, times):
    # §2.14 / §3.1 classes 10-11
    c = make(max_trie_depth=5, min_bfs_breadth=1, max_bfs_breadth=1, draft_token_num=2, match_type=match_type)
    put(c, [[1, 2, 3, 10, 11]] + [[1, 2, 3, 20, 21]] * times)
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 20]]


def test_prob_frequency_beats_recency():
    c = make(max_trie_depth=5, min_bfs_breadth=1, max_bfs_breadth=1, draft_token_num=2, match_type="PROB")
    put(c, [[1, 2, 3, 20, 21]] * 3 + [[1, 2, 3, 10, 11]])
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 20]]
    b = make(max_trie_depth=5, min_bfs_breadth=1, max_bfs_breadth=1, draft_token_num=2, match_type="BFS")
    put(b, [[1, 2, 3, 20, 21]] * 3 + [[1, 2, 3, 10, 11]])
    assert get(b, [[1, 2, 3]])[0].tolist() == [[3, 10]]


def test_longest_and_shorter_suffixes():
    # §2.14; §3.1 class 14 (second part)
    c = make(max_trie_depth=6, draft_token_num=4)
    put(c, [list(range(1, 8)), [99, 3, 4, 5, 6, 8]])
    assert get(c, [[2, 3, 4, 5, 6]])[0].tolist() == [[6, 8, 7, 0]]


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_incremental_equals_stateless_example(match_type):
    # §2.14 and §3.1 class 19 (a/b)
    c = make(max_trie_depth=4, draft_token_num=4, match_type=match_type)
    put(c, [[1, 2, 3, 4, 5, 6], [9, 3, 4, 7, 8]])
    # the spec's figures are BFS; PROB breaks the 6/8 tie by heap order (SGLang 0.5.23 agrees)
    last = 8 if match_type == "BFS" else 6
    expected = {3: ([3, 4, 7, 5], ["1000", "1100", "1110", "1101"]), 4: ([4, 7, 5, last], None), 6: ([6, 0, 0, 0], None)}
    hist = [1, 2, 3, 4, 5, 6]
    for n in (3, 4, 6):
        tail = hist[:n][-4:]
        stateful = get1(c, tail, rid="req", total=n)
        stateless = get1(c, tail, total=n)
        assert stateful == stateless
        ids, mrows = expected[n]
        assert stateful[0] == ids
        if mrows:
            assert stateful[1] == mrows


def test_hash_bucket_sibling_order():
    c = make(max_trie_depth=4, min_bfs_breadth=8, max_bfs_breadth=8, draft_token_num=8)
    put(c, [[1, 4], [1, 44], [1, 17]])
    assert get(c, [[1]])[0].tolist() == [[1, 44, 4, 17, 0, 0, 0, 0]]


def test_eviction_worked_example():
    # §2.3: D=2, capacity=5 (4 usable nodes), d=3
    c = make(max_trie_depth=2, draft_token_num=3, capacity=5)
    put(c, [[1, 2, 3]])
    assert get(c, [[1], [2]])[0].tolist() == [[1, 0, 0], [2, 3, 0]]
    put(c, [[1, 2]])
    assert get(c, [[1], [2], [3]])[0].tolist() == [[1, 2, 0], [2, 0, 0], [3, 0, 0]]
    assert c.memory_stats()["num_nodes"] == 4


def test_external_corpus_examples():
    # §2.14 external corpora
    c = make(draft_token_num=4, external_sam_budget=3, external_corpus_documents=[[1, 2, 3, 4, 5]])
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 4, 5, 0]]
    c = make(draft_token_num=4, external_sam_budget=3, external_corpus_documents=[[1, 2, 3], [4, 5, 6]])
    assert get(c, [[2, 3]])[0].tolist() == [[3, 0, 0, 0]]
    c = make(draft_token_num=6, external_sam_budget=2, external_corpus_documents=[[1, 2, 3, 20, 21]])
    put(c, [[1, 2, 3, 10, 11]])
    ids, mask = get(c, [[1, 2, 3]])
    assert ids.tolist() == [[3, 20, 10, 21, 11, 0]]
    assert rows(mask[0]) == ["100000", "110000", "101000", "110100", "101010", "100001"]
    c = make(draft_token_num=6, external_sam_budget=2, external_corpus_documents=[[1, 2, 3, 10, 99]])
    put(c, [[1, 2, 3, 10, 11]])
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 10, 99, 11, 0, 0]]
    c = make(match_type="PROB", draft_token_num=2, min_bfs_breadth=1, max_bfs_breadth=1, external_sam_budget=1,
             external_corpus_documents=[[1, 2, 3, 10]] + [[1, 2, 3, 20]] * 3)
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 20]]


# ---------------------------------------------------------------------------------------------
# §3.1 classes 3-18
def test_reset():
    c = make()
    put(c, CANON)
    c.reset()
    assert get(c, [[1, 2, 3]])[0].tolist() == [[3, 0, 0, 0, 0, 0, 0, 0]]


def test_no_match():
    c = make()
    put(c, CANON)
    ids = get(c, [[999, 888, 777]])[0][0].tolist()
    assert ids[0] == 777 and ids[1:] == [0] * 7
    assert get(make(), [[1, 2, 3]])[0][0].tolist() == [3] + [0] * 7


def test_multiple_inserts():
    c = make()
    put(c, [[1, 2, 3, 4, 5], [1, 2, 3, 44, 55]])
    ids = get(c, [[1, 2, 3]])[0][0].tolist()
    assert 4 in ids and 44 in ids


def test_squeeze():
    c = make(capacity=200)
    put(c, [list(range(1, 101))])
    ids, _ = get(c, [[1, 2, 3]])
    assert ids.shape == (1, 8)
    c = make(capacity=500, max_trie_depth=6)
    put(c, [list(range(1000, 1050))])
    put(c, [list(range(2000, 2050))])
    assert 2003 in get(c, [[2000, 2001, 2002]])[0][0].tolist()


def test_leaf_paths_from_mask():
    tokens = [3, 4, 44, 5, 55]
    mask = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]
    paths = NgramCorpus.leaf_paths_from_mask(tokens, mask)
    assert paths == [[3, 4, 5], [3, 44, 55]]
    assert all(3 in p for p in paths)
    chain = [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert NgramCorpus.leaf_paths_from_mask([10, 20, 30], chain) == [[10, 20, 30]]
    # padding rows show up as [last_token, 0] paths
    c = make()
    put(c, CANON)
    ids, mask = get(c, [[3, 44]])
    assert c.leaf_paths_from_mask(ids[0].tolist(), mask[0]) == [[44, 55, 66, 77, 88, 99, 100], [44, 0]]


def test_batch_consistency():
    c = make()
    put(c, CANON + [[5, 6, 7, 8], [7, 8, 9, 1, 2]])
    tails = [[1, 2, 3], [3, 44], [6, 7], [8, 9], [999]]
    ids, mask = get(c, tails)
    for i, t in enumerate(tails):
        one_ids, one_mask = get(c, [t])
        assert np.array_equal(one_ids[0], ids[i]) and np.array_equal(one_mask[0], mask[i])


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_mask_validity(match_type):
    c = make(match_type=match_type)
    put(c, CANON + [list(range(5, 40))])
    _, mask = get(c, [[1, 2, 3], [3, 44], [7], [999]])
    for m in mask:
        assert all(m[i][i] == 1 for i in range(8))
        assert m[0].tolist() == [1] + [0] * 7
        assert np.array_equal(m, np.tril(m))


def test_overlapping_suffixes():
    c = make()
    put(c, [[100, 200, 7, 8, 9, 50, 51], [300, 400, 7, 8, 9, 60, 61]])
    ids = get(c, [[7, 8, 9]])[0][0].tolist()
    assert 50 in ids and 60 in ids


def test_single_token_context():
    c = make()
    put(c, [[5, 10, 20, 30]])
    ids = get(c, [[5]])[0][0].tolist()
    assert ids[0] == 5 and 10 in ids


def test_long_context():
    c = make(max_trie_depth=6)
    put(c, [list(range(1, 20))])
    ids = get(c, [list(range(1, 16))])[0][0].tolist()
    assert ids[0] == 15 and 16 in ids


def test_draft_budget_saturation():
    c = make()
    put(c, [list(range(1, 30))])
    ids = get(c, [[1, 2, 3]])[0][0].tolist()
    assert len(ids) == 8 and any(t != 0 for t in ids[1:])


def test_truncate_numpy():
    c = make()
    put(c, CANON)
    ids, mask = get(c, [[1, 2, 3]])
    assert ids[0][:4].tolist() == [3, 4, 44, 5]
    assert np.array_equal(mask[0][:4, :4], np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]))


def test_reset_and_reinsert():
    c = make()
    put(c, CANON)
    c.reset()
    put(c, [[10, 20, 30, 40, 50]])
    assert get(c, [[1, 2, 3]])[0][0].tolist()[1:] == [0] * 7
    ids = get(c, [[10, 20, 30]])[0][0].tolist()
    assert ids[0] == 30 and 40 in ids


def test_squeeze_evicts_old():
    c = make(capacity=150, max_trie_depth=6)
    put(c, [list(range(5000, 5030))])
    assert 5003 in get(c, [[5000, 5001, 5002]])[0][0].tolist()
    for k in range(5):
        put(c, [list(range(6000 + 100 * k, 6030 + 100 * k))])
    assert 5003 not in get(c, [[5000, 5001, 5002]])[0][0].tolist()
    assert c.memory_stats()["num_nodes"] <= 149


# ---------------------------------------------------------------------------------------------
# §3.1 class 19 (c/d) and §4.2: incremental state never misses what a fresh lookup finds
def test_leaf_anchor_becomes_expandable():
    c = make(max_trie_depth=4, draft_token_num=4)
    put(c, [[1, 2, 3]])
    assert get1(c, [2, 3], rid="r", total=2)[0] == [3, 0, 0, 0]
    put(c, [[9, 2, 3, 4]])
    stateful = get1(c, [2, 3], rid="r", total=2)
    assert stateful == get1(c, [2, 3], total=2)
    assert 4 in stateful[0]


def test_stale_state_after_evictions_rebuilds():
    c = make(capacity=150, max_trie_depth=6, draft_token_num=4)
    hist = list(range(5000, 5030))
    put(c, [hist])
    for n in range(3, 8):
        get1(c, hist[:n][-6:], rid="r", total=n)
    for k in range(5):
        put(c, [list(range(6000 + 100 * k, 6030 + 100 * k))])
    put(c, [hist[5:20]])
    for n in range(8, 14):
        tail = hist[:n][-6:]
        assert get1(c, tail, rid="r", total=n) == get1(c, tail, total=n)


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_bug2_new_longer_context_not_missed(match_type):
    # §2.5 example: SGLang's cached state returns [30,70,80,90]; a fresh id gets [30,40,50,60].
    c = make(max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=1, draft_token_num=4, match_type=match_type)
    get1(c, [10, 20], rid="cached", total=2)
    put(c, [[10, 20, 30, 40, 50, 60]])
    put(c, [[30, 70, 80, 90]])
    fresh = get1(c, [10, 20, 30], total=3)
    assert fresh[0] == [30, 40, 50, 60]
    assert get1(c, [10, 20, 30], rid="cached", total=3) == fresh


def test_incremental_matches_stateless_under_growth():
    rng = random.Random(7)
    c = make(max_trie_depth=8, draft_token_num=6, capacity=400)
    hists = {f"r{i}": [rng.randint(1, 6) for _ in range(3)] for i in range(4)}
    for step in range(120):
        rid = rng.choice(sorted(hists))
        h = hists[rid]
        h += [rng.randint(1, 6) for _ in range(rng.randint(0, 2))]
        if rng.random() < 0.5:
            put(c, [h[-8:]])
        tail = h[-8:]
        ids, mask = c.batch_get([rid, "fresh-" + str(step)], [tail, tail], [len(h), len(h)])
        assert ids[:6].tolist() == ids[6:].tolist() and mask[:36].tolist() == mask[36:].tolist()


def test_same_req_id_twice_in_one_batch():
    c = make(max_trie_depth=4, draft_token_num=4)
    put(c, [[1, 2, 3, 4, 5, 6], [9, 3, 4, 7, 8]])
    ids, _ = c.batch_get(["x", "x"], [[1, 2, 3], [1, 2, 3, 4]], [3, 4])
    assert ids.tolist() == [3, 4, 7, 5, 4, 7, 5, 8]


# ---------------------------------------------------------------------------------------------
# §3.1 class 20: external SAM
class _IntTokenizer:
    def encode(self, text, add_special_tokens=False):
        assert add_special_tokens is False
        return [int(t) for t in text.split()]


def _jsonl(tmp_path, lines) -> Path:
    p = tmp_path / "corpus.jsonl"
    p.write_text("".join((json.dumps(x) if not isinstance(x, RawLine) else x.text) + "\n" for x in lines))
    return p


class RawLine:
    def __init__(self, text):
        self.text = text


def test_external_sam_jsonl(tmp_path):
    p = _jsonl(tmp_path, ["1 2 3 4 5", "8 9"])
    chunks = list(iter_external_corpus_chunks(p, _IntTokenizer(), max_tokens=8))
    assert chunks == [[1, 2, 3, 4, 5], [SEPARATOR_TOKEN, 8, 9]]
    c = make(draft_token_num=4, external_sam_budget=3)
    n = c.load_external_corpus_named(str(p), iter_external_corpus_chunks(p, _IntTokenizer(), max_tokens=8))
    c.commit_external_corpus_load(str(p), n)
    assert n == 8
    assert get(c, [[1, 2, 3]])[0][0].tolist()[:3] == [3, 4, 5]
    with pytest.raises(ValueError, match="token limit"):
        list(iter_external_corpus_chunks(p, _IntTokenizer(), max_tokens=4))


def test_iter_external_corpus_chunks_rules(tmp_path):
    p = _jsonl(tmp_path, ["1 2 3", "", RawLine("   "), "4 5 6 7 8", "9"])
    assert list(iter_external_corpus_chunks(p, _IntTokenizer(), 100, chunk_size=2)) == [
        [1, 2], [3], [SEPARATOR_TOKEN, 4], [5, 6], [7, 8], [SEPARATOR_TOKEN, 9]]
    # exactly hitting the limit is fine (3 + 1 + 5 + 1 + 1 = 11)
    assert sum(map(len, iter_external_corpus_chunks(p, _IntTokenizer(), 11))) == 11
    with pytest.raises(ValueError, match="token limit"):
        list(iter_external_corpus_chunks(p, _IntTokenizer(), 10))
    bad = _jsonl(tmp_path, ["1 2", 5])
    with pytest.raises(ValueError):
        list(iter_external_corpus_chunks(bad, _IntTokenizer(), 100))
    with pytest.raises(ValueError):
        list(iter_external_corpus_chunks(tmp_path / "missing.jsonl", _IntTokenizer(), 100))
    with pytest.raises(ValueError):
        list(iter_external_corpus_chunks(p, None, 100))
    with pytest.raises(ValueError):
        list(iter_external_corpus_chunks(p, _IntTokenizer(), 0))
    assert DEFAULT_CHUNK_SIZE == 4096 and SEPARATOR_TOKEN == -(2**31)


def test_external_sam_chain_boundary_and_merge():
    c = make(draft_token_num=4, external_sam_budget=3, external_corpus_documents=[[1, 2, 3, 4, 5]])
    assert get(c, [[1, 2, 3]])[0][0].tolist()[:3] == [3, 4, 5]
    c = make(draft_token_num=4, external_sam_budget=3, external_corpus_documents=[[1, 2, 3], [4, 5, 6]])
    assert get(c, [[1, 2, 3]])[0][0].tolist()[1:] == [0, 0, 0]
    c = make(draft_token_num=6, external_sam_budget=2, external_corpus_documents=[[1, 2, 3, 20, 21]])
    put(c, [[1, 2, 3, 10, 11]])
    ids, mask = get(c, [[1, 2, 3]])
    paths = c.leaf_paths_from_mask(ids[0].tolist(), mask[0])
    assert [3, 10, 11] in paths and [3, 20, 21] in paths
    for d, zeros in ((5, None), (6, 2)):
        c = make(draft_token_num=d, external_sam_budget=2, external_corpus_documents=[[1, 2, 3, 10, 99]])
        put(c, [[1, 2, 3, 10, 11]])
        ids, mask = get(c, [[1, 2, 3]])
        paths = c.leaf_paths_from_mask(ids[0].tolist(), mask[0])
        assert [3, 10, 11] in paths and [3, 10, 99] in paths
        if zeros is not None:
            assert ids[0].tolist().count(0) == zeros


# ---------------------------------------------------------------------------------------------
# §3.1 class 21: incremental lookups are not slower than rebuilding
def test_incremental_state_matches_rebuild_over_a_long_decode():
    """§3.1 #21 is a speed claim (measured in benchmarks/bench_ngram.py); here: same answers."""
    c = make(max_trie_depth=18, draft_token_num=8, capacity=500_000)
    rng = random.Random(0)
    seeds = [[rng.randint(0, 5000) + i for i in range(50)] for _ in range(100)]
    put(c, seeds)
    hist = list(seeds[0][:5])
    steps = [seeds[i % 100][j] for i in range(10) for j in range(50)][:500]

    def run(incremental: bool) -> list:
        h, out = list(hist), []
        for i, tok in enumerate(steps):
            h.append(tok)
            rid = "inc" if incremental else f"rebuild-{i}"
            ids, mask = c.batch_get([rid], [h[-18:]], [len(h)])
            out.append((ids.tolist(), mask.tolist()))
            if not incremental:
                c.erase_match_state([rid])
        return out

    inc, reb = run(True), run(False)
    assert inc == reb
    assert sum(any(t != 0 for t in ids[1:]) for ids, _ in inc) > 100  # the walk really drafts


# ---------------------------------------------------------------------------------------------
# §3.1 class 22: several named corpora
def test_multi_sam():
    c = make(draft_token_num=6, external_sam_budget=4, external_corpus_max_tokens=10)
    for cid, doc in (("a", [1, 2, 3, 10, 11]), ("b", [1, 2, 3, 20, 21])):
        c.commit_external_corpus_load(cid, c.load_external_corpus_named(cid, [doc]))
    assert c.list_external_corpora() == {"a": 5, "b": 5}
    assert c.remaining_token_budget == 0
    ids, mask = get(c, [[1, 2, 3]])
    paths = c.leaf_paths_from_mask(ids[0].tolist(), mask[0])
    assert [3, 10, 11] in paths and [3, 20, 21] in paths
    # duplicate id: ValueError, nothing changes
    with pytest.raises(ValueError, match="already exists"):
        c.load_external_corpus_named("a", [[7, 8]])
    assert c.list_external_corpora() == {"a": 5, "b": 5} and c.remaining_token_budget == 0
    c.remove_external_corpus("b")
    c.remove_external_corpus("does-not-exist")
    assert c.list_external_corpora() == {"a": 5} and c.remaining_token_budget == 5
    paths = c.leaf_paths_from_mask(*[x[0] for x in get(c, [[1, 2, 3]])])
    assert [3, 10, 11] in paths and [3, 20, 21] not in paths
    # a failed over-budget load keeps "a" usable and the budget unchanged
    with pytest.raises(ValueError, match="remaining token budget"):
        c.load_external_corpus_named("big", [[1, 2, 3], [4, 5, 6]])
    assert c.list_external_corpora() == {"a": 5} and c.remaining_token_budget == 5
    ids = get(c, [[1, 2, 3]])[0][0].tolist()
    assert 10 in ids and 11 in ids
    # exactly the budget is fine
    c.commit_external_corpus_load("c", c.load_external_corpus_named("c", [[1, 2], [3, 4, 5]]))
    assert c.remaining_token_budget == 0 and set(c.list_external_corpora()) == {"a", "c"}
    with pytest.raises(RuntimeError, match="empty"):
        c.load_external_corpus_named("e", [[], []])
    # present natively but not committed -> RuntimeError
    c.remove_external_corpus("c")
    n = c.load_external_corpus_named("x", [[1, 2]])
    assert n == 2
    with pytest.raises(RuntimeError, match="already exists"):
        c.load_external_corpus_named("x", [[1, 2]])


def test_make_corpus_documents_and_list_order():
    c = make(external_corpus_documents=[[1, 2, 3], [4, 5]])
    assert c.list_external_corpora() == {"test_corpus": 6}
    ids = [f"corpus-{i}" for i in range(20)]
    c = make(external_sam_budget=4)
    model = R.str_map()
    for cid in ids:
        c.load_external_corpus_named(cid, [[1, 2]])
        model.insert(cid, 2)
    for cid in ids[3:9]:
        c.remove_external_corpus(cid)
        model.erase(cid)
    assert list(c.list_external_corpora()) == [k for k, _ in model.items()]


# ---------------------------------------------------------------------------------------------
# §4 fixes
@pytest.mark.parametrize("capacity,depth", [(4, 4), (3, 4), (1, 2), (0, 2)])
def test_bug1_capacity_not_above_depth_raises(capacity, depth):
    with pytest.raises(ValueError, match="capacity"):
        NgramCorpus(max_trie_depth=depth, capacity=capacity)


def test_bug1_smallest_valid_capacity_works():
    c = NgramCorpus(max_trie_depth=4, capacity=5, draft_token_num=3)
    put(c, [list(range(50))])
    assert c.memory_stats()["num_nodes"] == 4
    ref = R.RefCorpus(max_trie_depth=4, capacity=5, draft_token_num=3)
    ref.put([list(range(50))])
    tails = [[46, 47], [48], [49], [47, 48]]
    assert get(c, tails)[0].reshape(-1).tolist() == ref.get(tails)[0]
    assert get(c, [[48]])[0][0].tolist() == [48, 49, 0]


def test_bug4_reset_drops_queued_inserts():
    c = make(max_trie_depth=6, capacity=100_000)
    for _ in range(5):
        c.batch_put([list(range(i, i + 300)) for i in range(0, 3000, 300)])  # keep the thread busy
        c.batch_put([[777, 778, 779]])
        c.reset()
        c.batch_put([[555, 556]])
        c.synchronize()
        assert get(c, [[777]])[0][0].tolist() == [777] + [0] * 7
        assert get(c, [[555]])[0][0].tolist()[:2] == [555, 556]
        assert c.memory_stats()["num_nodes"] == 3


def test_bug9_lone_zero_survives_merge():
    # trie proposes 5, the external corpus a genuine lone 0: SGLang drops the 0 ([3,5,0,0],
    # the trailing zeros being padding); here it is a real draft, ordered by the map ([3,0,5,0]).
    c = make(draft_token_num=4, external_sam_budget=1, external_corpus_documents=[[1, 2, 3, 0]])
    put(c, [[1, 2, 3, 5]])
    ids, mask = get(c, [[1, 2, 3]])
    assert ids[0].tolist() == [3, 0, 5, 0]
    assert rows(mask[0]) == ["1000", "1100", "1010", "1001"]
    ref = R.RefCorpus(max_trie_depth=12, draft_token_num=4, external_sam_budget=1, capacity=100_000)
    ref.put([[1, 2, 3, 5]])
    ref.add_corpus("test_corpus", [1, 2, 3, 0])
    assert ref.get([[1, 2, 3]])[0] == [3, 0, 5, 0]


def test_bug10_match_states_bounded():
    c = make(max_match_states=8)
    put(c, CANON)
    expected = get(c, [[1, 2, 3]])[0][0].tolist()
    for i in range(200):
        ids, _ = c.batch_get([f"leak-{i}"], [[1, 2, 3]], [3])
        assert ids.tolist() == expected
        assert c.memory_stats()["match_states"] <= 8
    # a batch larger than the cap still works and leaves at most the cap behind
    ids, _ = c.batch_get([f"big-{i}" for i in range(20)], [[1, 2, 3]] * 20, [3] * 20)
    assert ids.reshape(20, 8).tolist() == [expected] * 20
    assert c.memory_stats()["match_states"] <= 8
    assert DEFAULT_MAX_MATCH_STATES == make().max_match_states
    c.erase_match_state([f"big-{i}" for i in range(20)])
    assert c.memory_stats()["match_states"] == 0


# ---------------------------------------------------------------------------------------------
# bad inputs: clear Python exceptions, never a crash
def test_constructor_validation():
    with pytest.raises(ValueError, match="match_type"):
        NgramCorpus(match_type="DFS")
    with pytest.raises(RuntimeError, match="max_trie_depth must be greater than 1"):
        NgramCorpus(max_trie_depth=1)
    with pytest.raises(RuntimeError, match="min_bfs_breadth must be greater than 0"):
        NgramCorpus(min_bfs_breadth=0)
    with pytest.raises(RuntimeError, match="less than or equal to max_bfs_breadth"):
        NgramCorpus(min_bfs_breadth=5, max_bfs_breadth=4)
    with pytest.raises(RuntimeError, match="draft_token_num must be greater than 0"):
        NgramCorpus(draft_token_num=0)
    with pytest.raises(TypeError):
        NgramCorpus(max_trie_depth="18")
    with pytest.raises(TypeError):
        NgramCorpus(capacity=1e6)
    with pytest.raises(ValueError):
        NgramCorpus(capacity=2**40)
    with pytest.raises(ValueError):
        NgramCorpus(external_sam_budget=-1)
    c = NgramCorpus(draft_token_num=1)
    put(c, CANON)
    ids, mask = c.batch_get(["a"], [[1, 2, 3]], [3])
    assert ids.tolist() == [3] and mask.tolist() == [1]


def test_bad_batch_inputs():
    c = make()
    put(c, CANON)
    with pytest.raises(ValueError, match="same length"):
        c.batch_get(["a"], [[1], [2]], [1, 1])
    with pytest.raises(ValueError, match="same length"):
        c.batch_get(["a", "b"], [[1], [2]], [1])
    with pytest.raises(RuntimeError, match="empty token tail"):
        c.batch_get(["a", "b"], [[1], []], [1, 0])
    with pytest.raises(RuntimeError, match="int32"):
        c.batch_get(["a"], [[2**31]], [1])
    with pytest.raises(RuntimeError, match="int32"):
        c.batch_put([[1, 2], [-(2**31) - 1]])
    with pytest.raises(RuntimeError, match="int32"):
        c.batch_put([[2**70]])
    with pytest.raises(RuntimeError, match="int32"):
        c.batch_put([np.array([2**40], dtype=np.int64)])
    with pytest.raises(TypeError):
        c.batch_put("abc")
    with pytest.raises(TypeError):
        c.batch_put([[1, "a"]])
    with pytest.raises(TypeError):
        c.batch_put([1, 2, 3])
    with pytest.raises(TypeError):
        c.batch_put([["x", "y"]])
    with pytest.raises(TypeError):
        c.batch_put([np.array([1.5, 2.0])])
    with pytest.raises(TypeError):
        c.batch_get(["a"], [[1]], ["x"])
    with pytest.raises(TypeError):
        c.batch_get("a", [[1]], [1])
    with pytest.raises(TypeError):
        c.batch_get(["a"], [[None]], [1])
    with pytest.raises(TypeError):
        c.load_external_corpus_named(5, [[1]])
    # the corpus still works and nothing partial was inserted
    c.synchronize()
    assert get(c, [[1, 2, 3]])[0][0].tolist() == [3, 4, 44, 5, 55, 6, 66, 77]
    # int32 extremes, negative ids and empty sequences are fine
    put(c, [[], [-(2**31), 2**31 - 1, -5], []])
    assert get(c, [[-(2**31)]])[0][0].tolist()[:3] == [-(2**31), 2**31 - 1, -5]
    # numpy inputs
    put(c, [np.array([41, 42, 43], dtype=np.int32), np.array([41, 45], dtype=np.int64)])
    ids, _ = c.batch_get(np.array(["q"]), np.array([[40, 41]]), np.array([2]))
    assert ids.tolist()[:3] == [41, 42, 45]  # sibling order of the libstdc++ map (§2.10)


def test_native_methods_validate_buffers():
    c = make()
    o = c._obj
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    i32 = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
    out_ids, out_mask = np.empty(8, np.int64), np.empty(64, np.int64)
    with pytest.raises(ValueError, match="too small"):
        o.batch_match(i64(1), i32(1, 2), i64(0, 2), i64(2), np.empty(7, np.int64), out_mask)
    with pytest.raises(ValueError, match="too small"):
        o.batch_match(i64(1), i32(1, 2), i64(0, 2), i64(2), out_ids, np.empty(63, np.int64))
    with pytest.raises(TypeError, match="dtype"):
        o.batch_match(i64(1), i64(1, 2), i64(0, 2), i64(2), out_ids, out_mask)
    with pytest.raises(ValueError, match="offsets"):
        o.batch_match(i64(1), i32(1, 2), i64(0, 5), i64(2), out_ids, out_mask)
    with pytest.raises(ValueError, match="offsets"):
        o.async_insert(i32(1, 2), i64(0, 2, 1))
    with pytest.raises(ValueError):
        o.batch_match(i64(1), i32(1, 2), i64(0, 2), i64(2, 3), out_ids, out_mask)
    with pytest.raises(RuntimeError, match="empty token tail"):
        o.batch_match(i64(1), i32(1, 2), i64(0, 0), i64(2), out_ids, out_mask)
    with pytest.raises(ValueError):
        o.async_insert(np.zeros((2, 2), np.int32), i64(0, 4))


def test_insert_thread_error_surfaces_and_recovers():
    c = make()
    c._obj.debug_fail_next_insert("injected failure")
    c.batch_put([[1, 2, 3]])
    with pytest.raises(RuntimeError, match="injected failure"):
        c.synchronize()
    c.synchronize()  # reported once
    put(c, CANON)
    assert get(c, [[1, 2, 3]])[0][0].tolist() == [3, 4, 44, 5, 55, 6, 66, 77]
    # surfaced by the next call of another kind too
    c._obj.debug_fail_next_insert("second failure")
    c.batch_put([[9, 9]])
    while c._obj.pending():
        time.sleep(0.001)
    with pytest.raises(RuntimeError, match="second failure"):
        c.batch_get(["z"], [[1]], [1])


# ---------------------------------------------------------------------------------------------
# threads, memory, objects
def test_concurrent_put_get_reset_stress():
    c = make(max_trie_depth=8, draft_token_num=6, capacity=3000, max_match_states=64)
    ops = 2000  # per thread: a fixed amount of work, whatever the machine's load
    errors: list[BaseException] = []
    counts = [0] * 8

    def worker(tid: int) -> None:
        rng = random.Random(tid)
        hist = [rng.randint(1, 30) for _ in range(5)]
        try:
            for _ in range(ops):
                op = rng.random()
                if op < 0.4:
                    c.batch_put([[rng.randint(1, 30) for _ in range(rng.randint(0, 40))] for _ in range(4)])
                elif op < 0.95:
                    hist.append(rng.randint(1, 30))
                    tail = hist[-8:]
                    other = [rng.randint(1, 30) for _ in range(rng.randint(1, 9))]
                    ids, mask = c.batch_get([f"t{tid}", f"fresh{tid}-{counts[tid]}", f"t{tid}-o"],
                                            [tail, tail, other], [len(hist), len(hist), len(other)])
                    c.erase_match_state([f"fresh{tid}-{counts[tid]}"])
                    ids, mask = ids.reshape(3, 6), mask.reshape(3, 6, 6)
                    # stateful == stateless within one batch (one consistent trie snapshot)
                    assert ids[0].tolist() == ids[1].tolist() and np.array_equal(mask[0], mask[1])
                    assert ids[0][0] == tail[-1] and ids[2][0] == other[-1]
                    for m in mask:
                        assert np.array_equal(m, np.tril(m)) and all(m[i][i] == 1 for i in range(6))
                elif op < 0.98:
                    c.synchronize()
                else:
                    c.reset()
                counts[tid] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors[0]
    assert counts == [ops] * 8
    c.synchronize()
    assert c.memory_stats()["num_nodes"] <= 2999
    # still deterministic afterwards
    c.reset()
    put(c, CANON)
    ids, _ = get(c, [[1, 2, 3]])
    assert ids[0].tolist()[:3] == [3, 4, 44]


def test_memory_bytes_per_node_and_capacity_honoured():
    c = make(max_trie_depth=6, capacity=1000)
    stats0 = c.memory_stats()
    print(f"\nngram trie: {stats0['node_struct_bytes']} B node struct, "
          f"{stats0['bytes_per_node']:.1f} B per pool node incl. index, reserved {stats0['reserved_bytes']} B")
    assert stats0["node_struct_bytes"] == 48
    assert stats0["bytes_per_node"] <= 96
    rng = random.Random(3)
    for _ in range(20):
        put(c, [[rng.randint(0, 10_000) for _ in range(200)] for _ in range(5)])
        s = c.memory_stats()
        assert s["num_nodes"] == 999  # full pool, never more
        assert s["reserved_bytes"] == stats0["reserved_bytes"]
    c.reset()
    assert c.memory_stats()["num_nodes"] == 0


def test_objects_are_independent_and_collected():
    a, b = make(), make()
    put(a, CANON)
    assert get(b, [[1, 2, 3]])[0][0].tolist() == [3] + [0] * 7
    assert get(a, [[1, 2, 3]])[0][0].tolist()[1] == 4
    for _ in range(30):  # creating/destroying objects (with a live insert thread) is safe
        x = make(capacity=1000)
        x.batch_put([list(range(100))])
        del x
