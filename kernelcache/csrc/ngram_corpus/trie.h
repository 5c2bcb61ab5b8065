// Trie of n-grams with a fixed node pool and LRU eviction (spec ngram_corpus.md §2.1-2.4).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "sam.h"

namespace kcng {

// One trie node. Index 0 is the root; 0 doubles as "null" for every link because the root is
// never a child, a sibling or a member of the global recency list.
struct TrieNode {
  int64_t freq;         // number of (sequence, position) occurrences of this n-gram
  int32_t token;
  int32_t parent;
  int32_t first_child;  // head of the parent's recency list of children (most recent first)
  int32_t sib_prev;     // neighbours in the parent's recency list
  int32_t sib_next;
  int32_t lru_prev;     // neighbours in the global recency list (front = most recent)
  int32_t lru_next;     // also: next free node while the node is in the free list
  uint32_t version;     // bumped whenever the node is retired (evicted)
  uint32_t kids_stamp;  // bumped whenever a child is added/removed or a child's freq changes
};
static_assert(sizeof(TrieNode) == 48, "TrieNode layout");

// (parent, token) -> child, open addressing with linear probing and backward-shift deletion.
struct TrieSlot {
  int32_t parent;
  int32_t token;
  int32_t child;  // 0 = empty
};

class Trie {
 public:
  // capacity = pool size including the root (capacity - 1 usable nodes); max_depth = D.
  Trie(int64_t capacity, int32_t max_depth);

  // Insert every window of length <= D of one sequence (§2.2).
  void insert_sequence(const int32_t* s, int64_t n);
  // Empty the trie (§2.4). Pages of the pool are handed back to the OS.
  void clear();

  // child of p with token tok, or 0.
  inline int32_t child(int32_t p, int32_t tok) const {
    uint64_t h = mix_key(p, tok);
    size_t i = static_cast<size_t>(h) & mask_;
    for (;;) {
      const TrieSlot& s = slots_[i];
      if (s.child == 0) return 0;
      if (s.parent == p && s.token == tok) return s.child;
      i = (i + 1) & mask_;
    }
  }
  // Node reached by walking tokens t[0..len) from node `from` (0 = root), or 0 if absent.
  inline int32_t walk(int32_t from, const int32_t* t, int64_t len) const {
    int32_t cur = from;
    for (int64_t i = 0; i < len; ++i) {
      cur = child(cur, t[i]);
      if (cur == 0) return 0;
    }
    return cur;
  }
  const TrieNode& node(int32_t i) const { return nodes_[i]; }
  // The first k children of x by (freq desc, token asc). Results for nodes with many children are
  // cached until x's children change (not thread-safe: callers hold the corpus mutex).
  void top_k(int32_t x, int32_t k, std::vector<Kid>* out);
  int64_t used() const { return used_; }
  int64_t capacity() const { return capacity_; }
  // Number of nodes ever created (never decreases, also not on clear()); lets match states know
  // that an n-gram absent earlier is still absent.
  uint64_t created() const { return created_; }
  // Bytes of pool + index per pool node.
  double bytes_per_node() const {
    return static_cast<double>(nodes_.bytes() + slots_.bytes()) / static_cast<double>(capacity_);
  }
  size_t reserved_bytes() const { return nodes_.bytes() + slots_.bytes(); }

 private:
  void insert_window(const int32_t* w, int32_t len);
  void evict(int64_t k);
  int32_t alloc_node();
  void table_insert(int32_t p, int32_t tok, int32_t c);
  void table_erase(int32_t p, int32_t tok);
  void sib_unlink(int32_t c);
  void sib_push_front(int32_t p, int32_t c);
  void lru_unlink(int32_t c);
  void lru_push_front(int32_t c);

  int64_t capacity_;
  int32_t max_depth_;
  LazyArray<TrieNode> nodes_;
  LazyArray<TrieSlot> slots_;
  size_t mask_ = 0;
  int64_t used_ = 0;        // non-root nodes alive
  int32_t next_fresh_ = 1;  // first never-used pool index
  int32_t free_head_ = 0;   // retired nodes, linked through lru_next
  int32_t lru_head_ = 0;
  int32_t lru_tail_ = 0;
  uint64_t created_ = 0;
  std::vector<int32_t> path_;
  struct TopKEntry {
    uint32_t version;
    uint32_t stamp;
    int32_t k;
    std::vector<Kid> kids;
  };
  std::unordered_map<int32_t, TopKEntry> topk_cache_;
};

}  // namespace kcng
