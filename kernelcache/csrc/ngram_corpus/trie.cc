#include "trie.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace kcng {

Trie::Trie(int64_t capacity, int32_t max_depth) : capacity_(capacity), max_depth_(max_depth) {
  if (capacity < 2 || capacity > std::numeric_limits<int32_t>::max() - 1) {
    throw std::invalid_argument("capacity must be in [2, 2^31 - 2]");
  }
  if (max_depth < 1) throw std::invalid_argument("max_trie_depth must be >= 1");
  nodes_.allocate(static_cast<size_t>(capacity));
  // load factor <= 2/3
  size_t nslots = next_pow2(static_cast<size_t>(capacity) + static_cast<size_t>(capacity) / 2 + 2);
  slots_.allocate(nslots);
  mask_ = nslots - 1;
  path_.resize(static_cast<size_t>(max_depth));
}

void Trie::clear() {
  nodes_.zero();
  slots_.zero();
  used_ = 0;
  next_fresh_ = 1;
  free_head_ = 0;
  lru_head_ = lru_tail_ = 0;
  topk_cache_.clear();
  // created_ is monotonic on purpose (match states compare snapshots of it).
}

int32_t Trie::alloc_node() {
  int32_t c;
  if (free_head_ != 0) {
    c = free_head_;
    free_head_ = nodes_[c].lru_next;
  } else {
    if (next_fresh_ >= capacity_) throw std::runtime_error("ngram trie: node pool exhausted");
    c = next_fresh_++;
  }
  ++used_;
  return c;
}

void Trie::table_insert(int32_t p, int32_t tok, int32_t c) {
  size_t i = static_cast<size_t>(mix_key(p, tok)) & mask_;
  while (slots_[i].child != 0) i = (i + 1) & mask_;
  slots_[i] = TrieSlot{p, tok, c};
}

void Trie::table_erase(int32_t p, int32_t tok) {
  size_t i = static_cast<size_t>(mix_key(p, tok)) & mask_;
  for (;;) {
    const TrieSlot& s = slots_[i];
    if (s.child == 0) throw std::runtime_error("ngram trie: index entry missing");
    if (s.parent == p && s.token == tok) break;
    i = (i + 1) & mask_;
  }
  // backward-shift deletion
  size_t hole = i;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    const TrieSlot s = slots_[j];
    if (s.child == 0) break;
    size_t home = static_cast<size_t>(mix_key(s.parent, s.token)) & mask_;
    // can s move into hole? yes iff home is not cyclically in (hole, j]
    bool in_range = (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      slots_[hole] = s;
      hole = j;
    }
  }
  slots_[hole] = TrieSlot{0, 0, 0};
}

void Trie::sib_unlink(int32_t c) {
  TrieNode& n = nodes_[c];
  if (n.sib_prev) nodes_[n.sib_prev].sib_next = n.sib_next;
  else nodes_[n.parent].first_child = n.sib_next;
  if (n.sib_next) nodes_[n.sib_next].sib_prev = n.sib_prev;
  n.sib_prev = n.sib_next = 0;
}

void Trie::sib_push_front(int32_t p, int32_t c) {
  TrieNode& pn = nodes_[p];
  TrieNode& n = nodes_[c];
  n.sib_prev = 0;
  n.sib_next = pn.first_child;
  if (pn.first_child) nodes_[pn.first_child].sib_prev = c;
  pn.first_child = c;
}

void Trie::lru_unlink(int32_t c) {
  TrieNode& n = nodes_[c];
  if (n.lru_prev) nodes_[n.lru_prev].lru_next = n.lru_next;
  else lru_head_ = n.lru_next;
  if (n.lru_next) nodes_[n.lru_next].lru_prev = n.lru_prev;
  else lru_tail_ = n.lru_prev;
  n.lru_prev = n.lru_next = 0;
}

void Trie::lru_push_front(int32_t c) {
  TrieNode& n = nodes_[c];
  n.lru_prev = 0;
  n.lru_next = lru_head_;
  if (lru_head_) nodes_[lru_head_].lru_prev = c;
  else lru_tail_ = c;
  lru_head_ = c;
}

void Trie::evict(int64_t k) {
  for (int64_t i = 0; i < k; ++i) {
    int32_t v = lru_tail_;
    if (v == 0) {
      throw std::runtime_error("Insufficient node size: cannot evict " + std::to_string(k - i) +
                               " more node(s) from an empty trie");
    }
    TrieNode& n = nodes_[v];
    if (n.first_child != 0) throw std::runtime_error("ngram trie: eviction victim is not a leaf");
    table_erase(n.parent, n.token);
    nodes_[n.parent].kids_stamp += 1;
    sib_unlink(v);
    lru_unlink(v);
    n.version += 1;
    n.freq = 0;
    n.parent = 0;
    n.lru_next = free_head_;
    free_head_ = v;
    --used_;
  }
}

void Trie::insert_window(const int32_t* w, int32_t len) {
  int64_t free_nodes = (capacity_ - 1) - used_;
  if (len > free_nodes) evict(len - free_nodes);
  int32_t cur = 0;
  for (int32_t i = 0; i < len; ++i) {
    const int32_t tok = w[i];
    int32_t c = child(cur, tok);
    if (c != 0) {
      TrieNode& n = nodes_[c];
      n.freq += 1;
      nodes_[cur].kids_stamp += 1;
      if (nodes_[cur].first_child != c) {
        sib_unlink(c);
        sib_push_front(cur, c);
      }
      lru_unlink(c);
    } else {
      c = alloc_node();
      TrieNode& n = nodes_[c];
      n.freq = 1;
      n.token = tok;
      n.parent = cur;
      n.first_child = 0;
      n.lru_prev = n.lru_next = 0;
      n.kids_stamp = 0;
      nodes_[cur].kids_stamp += 1;
      sib_push_front(cur, c);
      table_insert(cur, tok, c);
      ++created_;
    }
    path_[static_cast<size_t>(i)] = c;
    cur = c;
  }
  for (int32_t i = len - 1; i >= 0; --i) lru_push_front(path_[static_cast<size_t>(i)]);
}

void Trie::top_k(int32_t x, int32_t k, std::vector<Kid>* out) {
  out->clear();
  if (k <= 0) return;
  const TrieNode& xn = nodes_[x];
  auto it = topk_cache_.find(x);
  if (it != topk_cache_.end() && it->second.version == xn.version && it->second.stamp == xn.kids_stamp &&
      it->second.k == k) {
    out->assign(it->second.kids.begin(), it->second.kids.end());
    return;
  }
  int64_t scanned = 0;
  const auto better = [](const Kid& a, const Kid& b) {
    return a.freq != b.freq ? a.freq > b.freq : a.token < b.token;
  };
  for (int32_t c = xn.first_child; c != 0; c = nodes_[c].sib_next) {
    ++scanned;
    const TrieNode& n = nodes_[c];
    Kid kid{c, n.token, n.freq};
    if (static_cast<int32_t>(out->size()) == k) {
      if (!better(kid, out->back())) continue;
      out->pop_back();
    }
    out->insert(std::upper_bound(out->begin(), out->end(), kid, better), kid);
  }
  if (scanned > static_cast<int64_t>(k) + 8) {
    if (topk_cache_.size() >= (1u << 16)) topk_cache_.clear();
    TopKEntry& e = topk_cache_[x];
    e.version = xn.version;
    e.stamp = xn.kids_stamp;
    e.k = k;
    e.kids.assign(out->begin(), out->end());
  }
}

void Trie::insert_sequence(const int32_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = std::min<int64_t>(n - i, max_depth_);
    insert_window(s + i, static_cast<int32_t>(len));
  }
}

}  // namespace kcng
