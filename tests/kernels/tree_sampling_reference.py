"""NumPy reference of ``tree_speculative_sampling_target_only``, written from
``docs/specs/tree_speculative_sampling.md`` (§2), for the tests of the CUDA kernel.

* The acceptance walk (§2.1-2.3) is bit-exact: float32 adds and IEEE divisions, in sibling order.
* The final pick (§2.4) is distribution-exact: the residual is float32, sums and prefix sums are
  float64, ``u = fp32(coin * fp32(total))``; the distance of ``u`` from the nearest bucket edge is
  returned as ``margin`` so tests can demand equality except within a small margin of an edge.
* ``generation`` selects G1, G2 or G3 (§0). The kernel implements G3.
* Malformed trees are handled exactly as the kernel does (docs/tree_speculative_sampling.md):
  node ids outside [0, N) end a list, each level visits at most N siblings, token ids outside
  [0, V) have probability 0 (never accepted in G3, no draft write), and slots outside
  [0, len(predicts)) are not written.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32


@dataclass
class RequestInfo:
    row: int  # node whose row the final token comes from
    n: int  # accepted draft tokens
    last: int  # slot that receives the final token
    bonus: bool  # n == S-1 (residual = target row)
    token: int  # the reference's final token
    margin: float  # |u - nearest bucket edge| (inf when the pick is a fallback with total == 0)
    total: float  # float64 sum of the residual
    fallback: bool  # no bucket crossed u


def _node(v: int, n: int) -> int:
    return int(v) if 0 <= v < n else -1


def reference(
    predicts: np.ndarray,
    accept_index: np.ndarray,
    accept_token_num: np.ndarray,
    candidates: np.ndarray,
    retrive_index: np.ndarray,
    retrive_next_token: np.ndarray,
    retrive_next_sibling: np.ndarray,
    uniform_samples: np.ndarray,
    uniform_samples_for_final_sampling: np.ndarray,
    target_probs: np.ndarray,
    draft_probs: np.ndarray,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    generation: str = "G3",
) -> list[RequestInfo]:
    """Mutates predicts, accept_index, accept_token_num, draft_probs in place (like the op)."""
    assert generation in ("G1", "G2", "G3")
    g3 = generation == "G3"
    bs, N = candidates.shape
    S = accept_index.shape[1]
    V = target_probs.shape[2]
    plen = predicts.shape[0]
    th_acc = max(F32(threshold_acc), F32(1e-9))
    th_single = F32(threshold_single)
    infos = []
    with np.errstate(all="ignore"):
        for b in range(bs):
            row = 0
            coin = F32(uniform_samples[b, 0])
            last = int(retrive_index[b, 0])
            accept_index[b, 0] = np.int32(np.int64(last).astype(np.int32))
            n = 0
            last_rej = -1
            cur = 0
            for _depth in range(1, S):
                cur = _node(retrive_next_token[b, cur], N)
                prob_acc = F32(0)
                accepted = False
                last_rej = -1
                steps = 0
                while cur != -1 and steps < N:
                    steps += 1
                    tok = int(candidates[b, cur])
                    valid = 0 <= tok < V
                    p = F32(target_probs[b, row, tok]) if valid else F32(0)
                    prob_acc = F32(prob_acc + p)
                    q = F32(prob_acc / th_acc)
                    if g3:
                        acc = bool(p > 0) and (bool(coin < q) or bool(p >= th_single))
                    else:
                        acc = bool(coin <= q) or bool(p >= th_single)
                    if acc:
                        slot = int(retrive_index[b, cur])
                        if 0 <= last < plen:
                            predicts[last] = tok
                        n += 1
                        accept_index[b, n] = np.int64(slot).astype(np.int32)
                        last = slot
                        row = cur
                        coin = F32(uniform_samples[b, cur])
                        accepted = True
                        break
                    if valid:
                        if p > 0:
                            last_rej = tok
                        draft_probs[b, row, tok] = target_probs[b, row, tok]
                    cur = _node(retrive_next_sibling[b, cur], N)
                if not accepted:
                    break
                last_rej = -1
            accept_token_num[b] = n
            bonus = n == S - 1
            t = target_probs[b, row].astype(F32)
            r = t.copy() if bonus else np.fmax(t - draft_probs[b, row].astype(F32), F32(0))
            r = np.where(r > 0, r, F32(0)).astype(F32)
            token, margin, total, fb = pick(r, F32(uniform_samples_for_final_sampling[b]), last_rej, generation)
            if 0 <= last < plen:
                predicts[last] = token
            infos.append(RequestInfo(row, n, last, bonus, token, margin, total, fb))
    return infos


def pick(r: np.ndarray, coin: np.float32, last_rej: int, generation: str = "G3"):
    """Final token from residual r (float32, entries <= 0 already zeroed). Returns
    (token, margin, total, fallback)."""
    V = r.shape[0]
    r64 = r.astype(np.float64)
    total = float(r64.sum())
    u = float(F32(F32(coin) * F32(total)))
    cdf = np.cumsum(r64)
    ok = (r > 0) & (cdf > u)
    idx = np.flatnonzero(ok)
    if idx.size:
        j = int(idx[0])
        lo = cdf[j - 1] if j > 0 else 0.0
        margin = min(abs(cdf[j] - u), abs(u - lo))
        return j, margin, total, False
    # no bucket crosses u
    positive = np.flatnonzero(r > 0)
    margin = abs(total - u) if total > 0 else float("inf")
    if generation == "G1":
        return V - 1, margin, total, True
    if positive.size:
        return int(positive[-1]), margin, total, True
    if generation == "G3" and last_rej >= 0:
        return int(last_rej), margin, total, True
    return V - 1, margin, total, True


# ----------------------------------------------------------------------------------------------
# Input builders (NumPy); GPU tests convert them to torch tensors.
# ----------------------------------------------------------------------------------------------
def chain_tree(N: int):
    nxt = np.array([i + 1 if i + 1 < N else -1 for i in range(N)], dtype=np.int64)
    sib = np.full(N, -1, dtype=np.int64)
    return nxt, sib


def kary_tree(N: int, k: int, rng: np.random.Generator | None = None, shuffle: bool = False):
    """BFS-numbered k-ary tree with N nodes; optional random sibling order."""
    children: list[list[int]] = [[] for _ in range(N)]
    for c in range(1, N):
        children[(c - 1) // k].append(c)
    nxt = np.full(N, -1, dtype=np.int64)
    sib = np.full(N, -1, dtype=np.int64)
    for x in range(N):
        ch = list(children[x])
        if shuffle and rng is not None:
            rng.shuffle(ch)
        if ch:
            nxt[x] = ch[0]
            for a, c in zip(ch, ch[1:]):
                sib[a] = c
    return nxt, sib


def random_tree(N: int, rng: np.random.Generator):
    """Random recursive tree (each node's parent is a random earlier node), random sibling order."""
    children: list[list[int]] = [[] for _ in range(N)]
    for c in range(1, N):
        children[int(rng.integers(0, c))].append(c)
    nxt = np.full(N, -1, dtype=np.int64)
    sib = np.full(N, -1, dtype=np.int64)
    for x in range(N):
        ch = list(children[x])
        rng.shuffle(ch)
        if ch:
            nxt[x] = ch[0]
            for a, c in zip(ch, ch[1:]):
                sib[a] = c
    return nxt, sib


def parents_of(nxt: np.ndarray, sib: np.ndarray) -> np.ndarray:
    N = nxt.shape[0]
    par = np.full(N, -1, dtype=np.int64)
    for x in range(N):
        c = nxt[x]
        steps = 0
        while c != -1 and steps < N:
            par[c] = x
            c = sib[c]
            steps += 1
    return par


def make_target(rng: np.random.Generator, rows: int, V: int, kind: str) -> np.ndarray:
    """rows x V float32 distributions. kinds: uniform, peaky, onehot, sparse (exact zeros)."""
    if kind == "onehot":
        t = np.zeros((rows, V), dtype=np.float32)
        t[np.arange(rows), rng.integers(0, V, rows)] = 1.0
        return t
    if kind == "uniform":
        t = rng.random((rows, V), dtype=np.float32) + F32(1e-3)
    elif kind == "peaky":
        logits = rng.standard_normal((rows, V)).astype(np.float64) * 4.0
        t = np.exp(logits - logits.max(axis=1, keepdims=True)).astype(np.float32)
    elif kind == "sparse":
        t = rng.random((rows, V), dtype=np.float32)
        keep = max(1, min(V, 8))
        mask = np.zeros((rows, V), dtype=bool)
        for i in range(rows):
            mask[i, rng.choice(V, size=keep, replace=False)] = True
        t = np.where(mask, t + F32(0.05), F32(0)).astype(np.float32)
    else:
        raise ValueError(kind)
    t = (t / t.sum(axis=1, keepdims=True, dtype=np.float64)).astype(np.float32)
    # no subnormals (the AOT sm90 build flushes them; keep bitwise tests build-independent)
    t[np.abs(t) < np.finfo(np.float32).tiny] = 0
    return t


def make_inputs(
    rng: np.random.Generator,
    bs: int,
    N: int,
    S: int,
    V: int,
    tree: str = "kary",
    k: int = 2,
    target: str = "peaky",
    cand_mode: str = "sample",
    coin_mode: str = "rand",
):
    """A full set of op inputs (NumPy), retrive_index = b*N + i, outputs pre-filled with -1.

    cand_mode: 'sample' draws each candidate from its parent's target row (realistic acceptance),
    'random' picks uniform ids. coin_mode: 'rand', 'edges' (coins on exact CDF edges of the
    candidates, 0 and 1-2^-24), 'zero'.
    """
    nxt = np.zeros((bs, N), dtype=np.int64)
    sib = np.zeros((bs, N), dtype=np.int64)
    for b in range(bs):
        if tree == "chain":
            nb, sb = chain_tree(N)
        elif tree == "root":
            nb, sb = np.full(N, -1, dtype=np.int64), np.full(N, -1, dtype=np.int64)
        elif tree == "kary":
            nb, sb = kary_tree(N, k)
        elif tree == "kary_shuffled":
            nb, sb = kary_tree(N, k, rng, shuffle=True)
        elif tree == "random":
            nb, sb = random_tree(N, rng)
        else:
            raise ValueError(tree)
        nxt[b], sib[b] = nb, sb
    target_probs = make_target(rng, bs * N, V, target).reshape(bs, N, V)
    candidates = np.zeros((bs, N), dtype=np.int64)
    for b in range(bs):
        par = parents_of(nxt[b], sib[b])
        for c in range(1, N):
            p = par[c]
            if p < 0 or cand_mode == "random":
                candidates[b, c] = rng.integers(0, V)
            else:
                row = target_probs[b, p].astype(np.float64)
                candidates[b, c] = rng.choice(V, p=row / row.sum())
    if coin_mode == "rand":
        uniform = rng.random((bs, N), dtype=np.float32)
    elif coin_mode == "zero":
        uniform = np.zeros((bs, N), dtype=np.float32)
    elif coin_mode == "edges":
        uniform = np.zeros((bs, N), dtype=np.float32)
        for b in range(bs):
            for x in range(N):
                # prefix sums (float32, sibling order) of x's children: exact edges
                edges = [F32(0), F32(1) - F32(2.0**-24)]
                acc = F32(0)
                c = nxt[b, x]
                steps = 0
                while c != -1 and steps < N:
                    acc = F32(acc + target_probs[b, x, candidates[b, c]])
                    edges.append(acc)
                    c = sib[b, c]
                    steps += 1
                e = F32(edges[rng.integers(0, len(edges))])
                uniform[b, x] = min(max(e, F32(0)), F32(1) - F32(2.0**-24))
    else:
        raise ValueError(coin_mode)
    uniform_final = rng.random(bs, dtype=np.float32)
    retrive_index = (np.arange(bs, dtype=np.int64)[:, None] * N + np.arange(N, dtype=np.int64)[None, :])
    return dict(
        **_fresh_outputs(bs, N, S),
        candidates=candidates,
        retrive_index=retrive_index,
        retrive_next_token=nxt,
        retrive_next_sibling=sib,
        uniform_samples=uniform,
        uniform_samples_for_final_sampling=uniform_final,
        target_probs=target_probs,
        draft_probs=np.zeros((bs, N, V), dtype=np.float32),
    )


def _fresh_outputs(bs: int, N: int, S: int) -> dict:
    """The three output tensors as the serving loop allocates them (-1 / 0 filled)."""
    return dict(
        predicts=np.full(bs * N, -1, dtype=np.int32),
        accept_index=np.full((bs, S), -1, dtype=np.int32),
        accept_token_num=np.zeros(bs, dtype=np.int32),
    )


ARG_ORDER = (
    "predicts",
    "accept_index",
    "accept_token_num",
    "candidates",
    "retrive_index",
    "retrive_next_token",
    "retrive_next_sibling",
    "uniform_samples",
    "uniform_samples_for_final_sampling",
    "target_probs",
    "draft_probs",
)


def run_reference(inputs: dict, threshold_single=1.0, threshold_acc=1.0, generation="G3"):
    """Copy inputs, run the reference, return (outputs dict, infos)."""
    out = {k: v.copy() for k, v in inputs.items()}
    infos = reference(*(out[k] for k in ARG_ORDER), threshold_single, threshold_acc, generation)
    return out, infos


# ----------------------------------------------------------------------------------------------
# Known answers of spec §2.7
# ----------------------------------------------------------------------------------------------
def known_answer_a():
    """§2.7 (a): bs=2, N=6, V=20, S=4, one-hot targets."""
    bs, N, V, S = 2, 6, 20, 4
    candidates = np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]], dtype=np.int64)
    retrive_index = np.array([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]], dtype=np.int64)
    nxt = np.array([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]], dtype=np.int64)
    sib = np.array([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]], dtype=np.int64)
    hot = np.full((bs, N), 18)
    hot[0, 0], hot[0, 3], hot[0, 4], hot[1, 0], hot[1, 4] = 3, 4, 5, 11, 12
    target = np.zeros((bs, N, V), dtype=np.float32)
    for b in range(bs):
        for i in range(N):
            target[b, i, hot[b, i]] = 1.0
    rng = np.random.default_rng(7)
    inputs = dict(
        **_fresh_outputs(bs, N, S),
        candidates=candidates,
        retrive_index=retrive_index,
        retrive_next_token=nxt,
        retrive_next_sibling=sib,
        uniform_samples=(rng.random((bs, N), dtype=np.float32) * F32(0.9) + F32(0.05)).astype(np.float32),
        uniform_samples_for_final_sampling=rng.random(bs, dtype=np.float32),
        target_probs=target,
        draft_probs=np.zeros((bs, N, V), dtype=np.float32),
    )
    expected_11 = dict(
        predicts=[3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18],
        accept_index=[[0, 3, 4, 5], [6, 10, 11, -1]],
        accept_token_num=[3, 2],
    )
    expected_00_g12 = dict(
        predicts=[1, 2, 18, -1, -1, -1, 11, -1, -1, -1, 12, 18],
        accept_index=[[0, 1, 2, -1], [6, 10, 11, -1]],
        accept_token_num=[2, 2],
    )
    return inputs, {"(1,1)": expected_11, "(0,0)G3": expected_11, "(0,0)G12": expected_00_g12}


# (cands, target root row, coin, threshold_single, G1/G2 answer, G3 answer); threshold_acc = 1
KNOWN_B = [
    ([2], [0.0, 1.0, 0.0], 0.0, 0.0, (2, 1), (1, 0)),
    ([2], [0.0, 1.0, 0.0], 0.0, 1.0, (2, 1), (1, 0)),
    ([1, 2, 3], [0.0, 0.25, 0.0, 0.75], 0.25, 1.0, (1, 1), (3, 1)),
    ([1], [0.0, 0.25, 0.75], 0.0, 1.0, (1, 1), (1, 1)),
    ([1], [0.0, 1.0], float(F32(1) - F32(2.0**-24)), 1.0, (1, 1), (1, 1)),
]


def known_answer_b(case):
    """One §2.7 (b) case: a single request whose root children are `cands`, S=2."""
    cands, row, coin, ts, g12, g3 = case
    V = len(row)
    N = 1 + len(cands)
    nxt = np.full((1, N), -1, dtype=np.int64)
    sib = np.full((1, N), -1, dtype=np.int64)
    nxt[0, 0] = 1
    for i in range(1, N - 1):
        sib[0, i] = i + 1
    target = np.zeros((1, N, V), dtype=np.float32)
    target[0, :, :] = np.asarray(row, dtype=np.float32)[None, :]
    inputs = dict(
        predicts=np.full(N, -1, dtype=np.int32),
        accept_index=np.full((1, 2), -1, dtype=np.int32),
        accept_token_num=np.zeros(1, dtype=np.int32),
        candidates=np.array([[0, *cands]], dtype=np.int64),
        retrive_index=np.arange(N, dtype=np.int64)[None, :],
        retrive_next_token=nxt,
        retrive_next_sibling=sib,
        uniform_samples=np.full((1, N), coin, dtype=np.float32),
        uniform_samples_for_final_sampling=np.array([0.5], dtype=np.float32),
        target_probs=target,
        draft_probs=np.zeros((1, N, V), dtype=np.float32),
    )
    return inputs, ts, g12, g3
