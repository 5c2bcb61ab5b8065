// Draft-tree construction (BFS §2.6, PROB §2.7), result assembly (§2.8) and merge (§2.11).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sam.h"
#include "trie.h"

namespace kcng {

// Sibling order of draft nodes reproduces the iteration order of a libstdc++ (GCC 12)
// std::unordered_map<int32_t, int32_t> that received the same insertions (§2.10.1):
// hash = key sign-extended to 64 bits, bucket = hash % bucket_count, bucket counts
// 1 -> 13 -> 29 -> ...; a new key goes first in its bucket's group, or to the front of the whole
// list when its bucket is empty; growth re-inserts the keys in list order with the same rule.
size_t next_bucket_count(size_t current);

inline size_t bucket_of(int32_t key, size_t bc) {
  return static_cast<size_t>(static_cast<uint64_t>(static_cast<int64_t>(key)) % bc);
}

class DraftTree {
 public:
  struct DNode {
    int32_t token;
    size_t bc;                 // emulated bucket count of the children map
    std::vector<int32_t> kids;  // children in emulated map iteration order
  };

  void reset(int32_t root_token) {
    count_ = 1;
    ensure(1);
    nodes_[0].token = root_token;
    nodes_[0].bc = 1;
    nodes_[0].kids.clear();
  }
  // number of draft nodes excluding the root
  int32_t size() const { return count_ - 1; }
  int32_t find(int32_t p, int32_t tok) const {
    for (int32_t k : nodes_[static_cast<size_t>(p)].kids) {
      if (nodes_[static_cast<size_t>(k)].token == tok) return k;
    }
    return -1;
  }
  int32_t add(int32_t p, int32_t tok) {
    int32_t id = count_++;
    ensure(static_cast<size_t>(count_));
    DNode& n = nodes_[static_cast<size_t>(id)];
    n.token = tok;
    n.bc = 1;
    n.kids.clear();
    insert_ordered(p, id);
    return id;
  }
  int32_t find_or_add(int32_t p, int32_t tok, bool* created) {
    int32_t c = find(p, tok);
    *created = c < 0;
    return c >= 0 ? c : add(p, tok);
  }
  const DNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }

 private:
  void ensure(size_t n) {
    if (nodes_.size() < n) nodes_.resize(std::max(n, nodes_.size() * 2));
  }
  void place(DNode& p, int32_t kid) {
    const size_t b = bucket_of(nodes_[static_cast<size_t>(kid)].token, p.bc);
    auto& v = p.kids;
    for (size_t i = 0; i < v.size(); ++i) {
      if (bucket_of(nodes_[static_cast<size_t>(v[i])].token, p.bc) == b) {
        v.insert(v.begin() + static_cast<std::ptrdiff_t>(i), kid);
        return;
      }
    }
    v.insert(v.begin(), kid);
  }
  void insert_ordered(int32_t pid, int32_t kid) {
    DNode& p = nodes_[static_cast<size_t>(pid)];
    if (p.bc == 1 || p.kids.size() + 1 > p.bc) {
      p.bc = next_bucket_count(p.bc);
      if (!p.kids.empty()) {
        scratch_.assign(p.kids.begin(), p.kids.end());
        p.kids.clear();
        for (int32_t k : scratch_) place(p, k);
      }
    }
    place(p, kid);
  }
  std::vector<DNode> nodes_;
  std::vector<int32_t> scratch_;
  int32_t count_ = 0;
};

// An assembled result: n slots, parent index per slot (-1 for slot 0); slots >= real are padding.
struct DraftResult {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  int32_t real = 1;
};

// Breadth-first walk of the draft tree in sibling order; pad with token 0 (parent 0) to n slots.
void assemble(const DraftTree& tree, int32_t n, DraftResult* out, std::vector<int32_t>* queue);
// Write ids (n) and the n x n mask (row-major) of a result into int64 buffers.
void write_result(const DraftResult& r, int32_t n, int64_t* ids, int64_t* mask);
// Merge secondary into primary (§2.11) producing a result with n slots. Padding rows never
// contribute a path (a genuine lone token 0 survives, §4.9 fix).
void merge_results(const DraftResult& primary, const DraftResult& secondary, int32_t n, DraftTree* tree,
                   DraftResult* out, std::vector<int32_t>* scratch);

struct Anchor {
  int32_t node;
  int32_t len;  // k (trie) or matched length l (SAM)
};

struct DraftParams {
  int32_t max_depth;  // D
  int32_t bmin;
  int32_t bmax;
};

// Source adapters: children in recency order and top-k by (freq desc, token asc).
struct TrieSource {
  Trie* trie;
  template <class F>
  void for_recency(int32_t x, F&& f) const {
    for (int32_t c = trie->node(x).first_child; c != 0; c = trie->node(c).sib_next) {
      if (!f(c, trie->node(c).token)) return;
    }
  }
  void top_k(int32_t x, int32_t k, std::vector<Kid>* out) const { trie->top_k(x, k, out); }
};

struct SamSource {
  const SuffixAutomaton* sam;
  template <class F>
  void for_recency(int32_t x, F&& f) const {
    for (const Kid* k = sam->bfs_begin(x); k != sam->bfs_end(x); ++k) {
      if (!f(k->node, k->token)) return;
    }
  }
  void top_k(int32_t x, int32_t k, std::vector<Kid>* out) const {
    out->clear();
    const Kid* b = sam->prob_begin(x);
    const Kid* e = sam->prob_end(x);
    if (e - b > k) e = b + k;
    out->assign(b, e);
  }
};

struct BfsItem {
  int32_t draft;
  int32_t node;
  double width;
};

struct ProbItem {
  double prob;
  int32_t draft;
  int32_t node;
  int32_t token;
};
struct ProbLess {
  bool operator()(const ProbItem& a, const ProbItem& b) const { return a.prob < b.prob; }
};

struct DraftScratch {
  std::vector<BfsItem> bfs_queue;
  std::vector<ProbItem> heap;
  std::vector<Kid> kids;
  std::vector<int32_t> ints;
};

template <class Src>
void draft_bfs(const Src& src, const std::vector<Anchor>& anchors, int32_t budget, const DraftParams& p,
               DraftTree* tree, DraftScratch* s) {
  const int64_t mmd = std::max<int64_t>(1, static_cast<int64_t>(p.max_depth) - 1);
  const double step = static_cast<double>(p.bmax - p.bmin) / static_cast<double>(mmd);
  auto& q = s->bfs_queue;
  for (const Anchor& a : anchors) {
    if (tree->size() >= budget) break;
    q.clear();
    size_t head = 0;
    q.push_back(BfsItem{0, a.node, static_cast<double>(mmd - a.len) * step + static_cast<double>(p.bmin)});
    while (head < q.size() && tree->size() < budget) {
      const BfsItem it = q[head++];
      const double tw = std::trunc(it.width);
      const int64_t width = tw >= 1.0 ? static_cast<int64_t>(tw) : 1;
      int64_t visited = 0;
      src.for_recency(it.node, [&](int32_t c, int32_t tok) {
        if (visited >= width || tree->size() >= budget) return false;
        ++visited;
        bool created;
        int32_t dn = tree->find_or_add(it.draft, tok, &created);
        q.push_back(BfsItem{dn, c, it.width - step});
        return true;
      });
    }
  }
}

template <class Src>
void draft_prob(const Src& src, const std::vector<Anchor>& anchors, int32_t budget, const DraftParams& p,
                DraftTree* tree, DraftScratch* s) {
  auto& heap = s->heap;
  auto& kids = s->kids;
  heap.clear();
  ProbLess less;
  auto push_children = [&](int32_t x, int32_t draft, double pi) {
    src.top_k(x, p.bmax, &kids);
    int64_t sum = 0;
    for (const Kid& k : kids) sum += k.freq;
    const double denom = sum <= 0 ? 1.0 : static_cast<double>(sum);
    for (const Kid& k : kids) {
      heap.push_back(ProbItem{static_cast<double>(k.freq) / denom * pi, draft, k.node, k.token});
      std::push_heap(heap.begin(), heap.end(), less);
    }
  };
  for (const Anchor& a : anchors) {
    if (tree->size() >= budget) break;
    push_children(a.node, 0, 1.0);
    while (!heap.empty() && tree->size() < budget) {
      std::pop_heap(heap.begin(), heap.end(), less);
      const ProbItem it = heap.back();
      heap.pop_back();
      bool created;
      int32_t dn = tree->find_or_add(it.draft, it.token, &created);
      push_children(it.node, dn, it.prob);
    }
  }
}

}  // namespace kcng
