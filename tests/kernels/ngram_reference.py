"""Pure-Python reference model of the n-gram corpus, written from docs/specs/ngram_corpus.md.

Slow and simple on purpose: dicts and lists, no incremental state (this project's native
incremental state is specified to equal a fresh lookup, §4.2 fix), synchronous inserts.
It reproduces the container behaviours of §2.10 (libstdc++ unordered_map iteration order,
std::priority_queue pop order, std::hash<std::string>) so outputs can be compared element
for element. Deliberate differences from SGLang kept here too: padding (not a genuine lone
token 0) is what merges drop (§4.9).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

SEP = -(2**31)
_BUCKETS = [13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061]
_M64 = (1 << 64) - 1


def _next_bucket_count(bc: int) -> int:
    for b in _BUCKETS:
        if b > bc:
            return b
    raise ValueError("too many keys")


def std_hash_bytes(data: bytes, seed: int = 0xC70F6907) -> int:
    """libstdc++ _Hash_bytes (64-bit), i.e. std::hash<std::string> (§2.10.3)."""
    mul = 0xC6A4A7935BD1E995

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)

    n = len(data)
    h = (seed ^ ((n * mul) & _M64)) & _M64
    nwords = n // 8
    for i in range(nwords):
        k = int.from_bytes(data[8 * i : 8 * i + 8], "little")
        k = (shift_mix((k * mul) & _M64) * mul) & _M64
        h ^= k
        h = (h * mul) & _M64
    rem = data[8 * nwords :]
    if rem:
        h ^= int.from_bytes(rem, "little")
        h = (h * mul) & _M64
    h = (shift_mix(h) * mul) & _M64
    return shift_mix(h)


class UnorderedMapOrder:
    """Iteration order of a libstdc++ unique-key unordered_map under inserts/erases (§2.10.1)."""

    def __init__(self, hasher) -> None:
        self._hash = hasher
        self.bc = 1
        self.keys: list = []
        self.vals: dict = {}

    def _bucket(self, k) -> int:
        return self._hash(k) % self.bc

    def _place(self, k) -> None:
        b = self._bucket(k)
        for i, x in enumerate(self.keys):
            if self._bucket(x) == b:
                self.keys.insert(i, k)
                return
        self.keys.insert(0, k)

    def get(self, k, default=None):
        return self.vals.get(k, default)

    def __contains__(self, k) -> bool:
        return k in self.vals

    def __len__(self) -> int:
        return len(self.keys)

    def insert(self, k, v) -> None:
        assert k not in self.vals
        if self.bc == 1 or len(self.keys) + 1 > self.bc:
            self.bc = _next_bucket_count(self.bc)
            old, self.keys = self.keys, []
            for x in old:
                self._place(x)
        self._place(k)
        self.vals[k] = v

    def erase(self, k) -> None:
        if k in self.vals:
            del self.vals[k]
            self.keys.remove(k)

    def items(self):
        return [(k, self.vals[k]) for k in self.keys]


def int_map() -> UnorderedMapOrder:
    return UnorderedMapOrder(lambda k: k & _M64)


def str_map() -> UnorderedMapOrder:
    return UnorderedMapOrder(lambda s: std_hash_bytes(s.encode()))


# -- std::priority_queue (libstdc++ heap algorithms, "less" on probability) ----------------------
def heap_push(v: list, item: tuple) -> None:
    v.append(item)
    hole = len(v) - 1
    while hole > 0:
        parent = (hole - 1) // 2
        if v[parent][0] < item[0]:
            v[hole] = v[parent]
            hole = parent
        else:
            break
    v[hole] = item


def heap_pop(v: list) -> tuple:
    top = v[0]
    value = v.pop()
    n = len(v)
    if n == 0:
        return top
    hole = 0
    second = 0
    while second < (n - 1) // 2:
        second = 2 * (second + 1)
        if v[second][0] < v[second - 1][0]:
            second -= 1
        v[hole] = v[second]
        hole = second
    if (n & 1) == 0 and second == (n - 2) // 2:
        second = 2 * (second + 1)
        v[hole] = v[second - 1]
        hole = second - 1
    parent = (hole - 1) // 2
    while hole > 0 and v[parent][0] < value[0]:
        v[hole] = v[parent]
        hole = parent
        parent = (hole - 1) // 2
    v[hole] = value
    return top


# -- trie ------------------------------------------------------------------------------------------
class _Node:
    __slots__ = ("token", "parent", "children", "recency", "freq", "alive")

    def __init__(self, token: int, parent: Optional["_Node"]) -> None:
        self.token = token
        self.parent = parent
        self.children: Dict[int, _Node] = {}
        self.recency: List[_Node] = []  # most recently touched first
        self.freq = 0
        self.alive = True


class RefTrie:
    def __init__(self, capacity: int, max_depth: int) -> None:
        self.capacity = capacity
        self.D = max_depth
        self.clear()

    def clear(self) -> None:
        self.root = _Node(0, None)
        self.used = 0
        self.lru: "OrderedDict[int, _Node]" = OrderedDict()  # first = most recent

    def _evict(self, k: int) -> None:
        for _ in range(k):
            if not self.lru:
                raise RuntimeError("Insufficient node size")
            _, v = self.lru.popitem(last=True)
            assert not v.children, "victim must be a leaf"
            p = v.parent
            del p.children[v.token]
            p.recency.remove(v)
            v.alive = False
            self.used -= 1

    def insert(self, seq: Sequence[int]) -> None:
        n = len(seq)
        for i in range(n):
            w = seq[i : i + min(n - i, self.D)]
            free = self.capacity - 1 - self.used
            if len(w) > free:
                self._evict(len(w) - free)
            cur = self.root
            path = []
            for t in w:
                c = cur.children.get(t)
                if c is not None:
                    c.freq += 1
                    cur.recency.remove(c)
                    cur.recency.insert(0, c)
                else:
                    c = _Node(t, cur)
                    c.freq = 1
                    cur.children[t] = c
                    cur.recency.insert(0, c)
                    self.used += 1
                path.append(c)
                cur = c
            for node in reversed(path):
                self.lru[id(node)] = node
                self.lru.move_to_end(id(node), last=False)

    def anchors(self, tail: Sequence[int]) -> List[Tuple[_Node, int]]:
        m = min(len(tail), self.D)
        out = []
        for k in range(m, 0, -1):
            cur = self.root
            for t in tail[len(tail) - k :]:
                cur = cur.children.get(t)
                if cur is None:
                    break
            if cur is not None and cur.children:
                out.append((cur, k))
        return out

    @staticmethod
    def recency_children(x: _Node):
        return [(c, c.token) for c in x.recency]

    @staticmethod
    def freq_children(x: _Node):
        kids = sorted(x.recency, key=lambda c: (-c.freq, c.token))
        return [(c, c.token, c.freq) for c in kids]


# -- suffix automaton ----------------------------------------------------------------------------
class RefSAM:
    def __init__(self, tokens: Sequence[int]) -> None:
        self.len = [0]
        self.link = [-1]
        self.next: List[Dict[int, int]] = [{}]
        self.cnt = [0]
        self.endpos = [-1]
        last = 0
        for pos, c in enumerate(tokens):
            cur = self._new(self.len[last] + 1, 1, pos)
            p = last
            while p != -1 and c not in self.next[p]:
                self.next[p][c] = cur
                p = self.link[p]
            if p == -1:
                self.link[cur] = 0
            else:
                q = self.next[p][c]
                if self.len[p] + 1 == self.len[q]:
                    self.link[cur] = q
                else:
                    clone = self._new(self.len[p] + 1, 0, self.endpos[q])
                    self.next[clone] = dict(self.next[q])
                    self.link[clone] = self.link[q]
                    while p != -1 and self.next[p].get(c) == q:
                        self.next[p][c] = clone
                        p = self.link[p]
                    self.link[q] = clone
                    self.link[cur] = clone
            last = cur
        self.num_tokens = len(tokens)
        for s in sorted(range(1, len(self.len)), key=lambda s: -self.len[s]):
            l = self.link[s]
            self.cnt[l] += self.cnt[s]
            self.endpos[l] = max(self.endpos[l], self.endpos[s])
        self.prob_kids = []
        self.bfs_kids = []
        for s in range(len(self.len)):
            kids = [(t, q) for t, q in self.next[s].items() if t != SEP]
            self.prob_kids.append(sorted(kids, key=lambda tq: (-self.cnt[tq[1]], tq[0])))
            self.bfs_kids.append(sorted(kids, key=lambda tq: (-self.endpos[tq[1]], tq[0])))

    def _new(self, length: int, cnt: int, endpos: int) -> int:
        self.len.append(length)
        self.link.append(-1)
        self.next.append({})
        self.cnt.append(cnt)
        self.endpos.append(endpos)
        return len(self.len) - 1

    def anchors(self, tail: Sequence[int]) -> List[Tuple[int, int]]:
        s, l = 0, 0
        for t in tail:
            while True:
                if t in self.next[s]:
                    s = self.next[s][t]
                    l += 1
                    break
                if s == 0:
                    l = 0
                    break
                s = self.link[s]
                l = min(l, self.len[s])
        out = []
        v = s
        while v > 0:
            l = min(l, self.len[v])
            if self.prob_kids[v]:
                out.append((v, l))
            v = self.link[v]
        return out

    def recency_children(self, x: int):
        return [(q, t) for t, q in self.bfs_kids[x]]

    def freq_children(self, x: int):
        return [(q, t, self.cnt[q]) for t, q in self.prob_kids[x]]


# -- draft trees -------------------------------------------------------------------------------------
class DraftTree:
    def __init__(self, root_token: int) -> None:
        self.tokens = [root_token]
        self.kids = [int_map()]

    @property
    def size(self) -> int:
        return len(self.tokens) - 1

    def find_or_add(self, p: int, tok: int) -> int:
        c = self.kids[p].get(tok)
        if c is not None:
            return c
        c = len(self.tokens)
        self.tokens.append(tok)
        self.kids.append(int_map())
        self.kids[p].insert(tok, c)
        return c


def draft_bfs(src, anchors, budget: int, D: int, bmin: int, bmax: int, tree: DraftTree) -> None:
    mmd = max(1, D - 1)
    step = (bmax - bmin) / mmd
    for node, k in anchors:
        if tree.size >= budget:
            break
        queue = [(0, float(mmd - k) * step + bmin, node)]
        qi = 0
        while qi < len(queue) and tree.size < budget:
            p, w, x = queue[qi]
            qi += 1
            width = max(1, int(w))  # int() truncates toward zero
            visited = 0
            for c, tok in src.recency_children(x):
                if visited >= width or tree.size >= budget:
                    break
                visited += 1
                dn = tree.find_or_add(p, tok)
                queue.append((dn, w - step, c))


def draft_prob(src, anchors, budget: int, bmax: int, tree: DraftTree) -> None:
    heap: list = []

    def push_children(x, draft, pi):
        kids = src.freq_children(x)[:bmax]
        s = sum(f for _, _, f in kids)
        denom = float(s) if s > 0 else 1.0
        for c, tok, f in kids:
            heap_push(heap, (float(f) / denom * pi, draft, c, tok))

    for node, _k in anchors:
        if tree.size >= budget:
            break
        push_children(node, 0, 1.0)
        while heap and tree.size < budget:
            prob, p, c, tok = heap_pop(heap)
            dn = tree.find_or_add(p, tok)
            push_children(c, dn, prob)


def assemble(tree: DraftTree, n: int) -> Tuple[List[int], List[int], int]:
    tokens = [tree.tokens[0]]
    parents = [-1]
    queue = [0]
    qi = 0
    while qi < len(queue) and len(tokens) < n:
        u = queue[qi]
        for tok, v in tree.kids[u].items():
            if len(tokens) >= n:
                break
            tokens.append(tok)
            parents.append(qi)
            queue.append(v)
        qi += 1
    real = len(tokens)
    while len(tokens) < n:
        tokens.append(0)
        parents.append(0)
    return tokens, parents, real


def mask_of(parents: List[int]) -> List[List[int]]:
    n = len(parents)
    m = [[0] * n for _ in range(n)]
    m[0][0] = 1
    for i in range(1, n):
        p = parents[i]
        m[i][: p + 1] = m[p][: p + 1]
        m[i][i] = 1
    return m


def leaf_paths(result) -> List[List[int]]:
    tokens, parents, real = result
    has_child = [False] * real
    for i in range(1, real):
        has_child[parents[i]] = True
    out = []
    for i in range(1, real):
        if has_child[i]:
            continue
        path = []
        v = i
        while v > 0:
            path.append(tokens[v])
            v = parents[v]
        out.append(path[::-1])
    return out


def merge(primary, secondary, n: int):
    tree = DraftTree(primary[0][0])
    paths = leaf_paths(primary) + leaf_paths(secondary)
    full = False
    for path in paths:
        cur = 0
        for tok in path:
            c = tree.kids[cur].get(tok)
            if c is None:
                if tree.size >= n - 1:
                    full = True
                    break
                c = tree.find_or_add(cur, tok)
            cur = c
        if full:
            break
    return assemble(tree, n)


class RefCorpus:
    """Reference model of NgramCorpus with synchronous inserts and stateless matching."""

    def __init__(self, max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=8, draft_token_num=8,
                 match_type="BFS", capacity=1_000_000, external_sam_budget=0) -> None:
        self.D = max_trie_depth
        self.bmin = min_bfs_breadth
        self.bmax = max_bfs_breadth
        self.d = draft_token_num
        self.match_type = match_type
        self.sam_budget = external_sam_budget
        self.trie = RefTrie(capacity, max_trie_depth)
        self.externals = str_map()

    def put(self, seqs) -> None:
        for s in seqs:
            self.trie.insert(list(s))

    def reset(self) -> None:
        self.trie.clear()

    def add_corpus(self, cid: str, tokens: Sequence[int]) -> int:
        self.externals.insert(cid, RefSAM(list(tokens)))
        return len(tokens)

    def remove_corpus(self, cid: str) -> None:
        self.externals.erase(cid)

    def list_corpora(self) -> Dict[str, int]:
        return {k: v.num_tokens for k, v in self.externals.items()}

    def _draft(self, src, anchors, budget: int, last: int, n: int):
        tree = DraftTree(last)
        if self.match_type == "BFS":
            draft_bfs(src, anchors, budget, self.D, self.bmin, self.bmax, tree)
        else:
            draft_prob(src, anchors, budget, self.bmax, tree)
        return assemble(tree, n)

    def get_one(self, tail: Sequence[int]):
        tail = list(tail)
        d = self.d
        total = d - 1
        n_ext = len(self.externals)
        sb = min(self.sam_budget, total)
        per = sb // n_ext if n_ext else 0
        use_ext = n_ext > 0 and sb > 0 and per > 0
        trie_budget = total - per * n_ext if use_ext else total
        anchors = self.trie.anchors(tail)
        if not use_ext:
            res = self._draft(self.trie, anchors, trie_budget, tail[-1], d)
        else:
            res = self._draft(self.trie, anchors, trie_budget, tail[-1], trie_budget + 1)
            m = min(len(tail), self.D)
            for _cid, sam in self.externals.items():
                sres = self._draft(sam, sam.anchors(tail[len(tail) - m :]), per, tail[-1], per + 1)
                res = merge(res, sres, d)
        return res[0], mask_of(res[1])

    def get(self, tails) -> Tuple[List[int], List[int]]:
        ids: List[int] = []
        mask: List[int] = []
        for t in tails:
            i, m = self.get_one(t)
            ids += i
            for row in m:
                mask += row
        return ids, mask
