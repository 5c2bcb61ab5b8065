#include "sam.h"

#include <algorithm>
#include <stdexcept>

namespace kcng {

SuffixAutomaton::SuffixAutomaton(const int32_t* tokens, int64_t n, int32_t keep) {
  if (n <= 0) throw std::runtime_error("External corpus is empty");
  if (n > (static_cast<int64_t>(1) << 30)) throw std::runtime_error("External corpus is too large");
  size_t reserve_states = static_cast<size_t>(2 * n + 1);
  len_.reserve(reserve_states);
  link_.reserve(reserve_states);
  first_edge_.reserve(reserve_states);
  endpos_.reserve(reserve_states);
  cnt_.reserve(reserve_states);
  edges_.reserve(static_cast<size_t>(2 * n + 4));
  table_.assign(next_pow2(static_cast<size_t>(4 * n + 16)), Slot{0, 0, 0});
  mask_ = table_.size() - 1;
  new_state(0, -1, 0, -1);  // root
  for (int64_t i = 0; i < n; ++i) extend(tokens[i], static_cast<int32_t>(i));
  num_tokens_ = n;
  finalize(keep);
  // the transition index is still needed for matching; edges are needed through it.
}

int32_t SuffixAutomaton::new_state(int32_t len, int32_t link, int64_t cnt, int32_t endpos) {
  len_.push_back(len);
  link_.push_back(link);
  first_edge_.push_back(-1);
  endpos_.push_back(endpos);
  cnt_.push_back(cnt);
  return static_cast<int32_t>(len_.size() - 1);
}

int32_t SuffixAutomaton::find_edge(int32_t s, int32_t tok) const {
  size_t i = static_cast<size_t>(mix_key(s, tok)) & mask_;
  for (;;) {
    const Slot& sl = table_[i];
    if (sl.edge_plus1 == 0) return -1;
    if (sl.state == s && sl.token == tok) return sl.edge_plus1 - 1;
    i = (i + 1) & mask_;
  }
}

void SuffixAutomaton::grow_table() {
  std::vector<Slot> old;
  old.swap(table_);
  table_.assign(old.size() * 2, Slot{0, 0, 0});
  mask_ = table_.size() - 1;
  for (const Slot& sl : old) {
    if (sl.edge_plus1 == 0) continue;
    size_t i = static_cast<size_t>(mix_key(sl.state, sl.token)) & mask_;
    while (table_[i].edge_plus1 != 0) i = (i + 1) & mask_;
    table_[i] = sl;
  }
}

void SuffixAutomaton::add_edge(int32_t s, int32_t tok, int32_t to) {
  if ((table_used_ + 1) * 3 > table_.size() * 2) grow_table();
  int32_t e = static_cast<int32_t>(edges_.size());
  edges_.push_back(Edge{tok, to, first_edge_[static_cast<size_t>(s)]});
  first_edge_[static_cast<size_t>(s)] = e;
  size_t i = static_cast<size_t>(mix_key(s, tok)) & mask_;
  while (table_[i].edge_plus1 != 0) i = (i + 1) & mask_;
  table_[i] = Slot{s, tok, e + 1};
  ++table_used_;
}

void SuffixAutomaton::extend(int32_t tok, int32_t pos) {
  int32_t cur = new_state(len_[static_cast<size_t>(last_)] + 1, -1, 1, pos);
  int32_t p = last_;
  while (p != -1 && find_edge(p, tok) < 0) {
    add_edge(p, tok, cur);
    p = link_[static_cast<size_t>(p)];
  }
  if (p == -1) {
    link_[static_cast<size_t>(cur)] = 0;
  } else {
    int32_t q = transition(p, tok);
    if (len_[static_cast<size_t>(p)] + 1 == len_[static_cast<size_t>(q)]) {
      link_[static_cast<size_t>(cur)] = q;
    } else {
      int32_t clone = new_state(len_[static_cast<size_t>(p)] + 1, link_[static_cast<size_t>(q)], 0,
                                endpos_[static_cast<size_t>(q)]);
      // copy q's transitions (collect first: add_edge may reallocate edges_)
      std::vector<std::pair<int32_t, int32_t>> tr;
      for (int32_t e = first_edge_[static_cast<size_t>(q)]; e >= 0; e = edges_[static_cast<size_t>(e)].next) {
        tr.emplace_back(edges_[static_cast<size_t>(e)].token, edges_[static_cast<size_t>(e)].to);
      }
      for (auto it = tr.rbegin(); it != tr.rend(); ++it) add_edge(clone, it->first, it->second);
      while (p != -1) {
        int32_t e = find_edge(p, tok);
        if (e < 0 || edges_[static_cast<size_t>(e)].to != q) break;
        edges_[static_cast<size_t>(e)].to = clone;
        p = link_[static_cast<size_t>(p)];
      }
      link_[static_cast<size_t>(q)] = clone;
      link_[static_cast<size_t>(cur)] = clone;
    }
  }
  last_ = cur;
}

void SuffixAutomaton::finalize(int32_t keep) {
  const size_t ns = len_.size();
  // states by maxlen descending (counting sort)
  int32_t maxlen = 0;
  for (int32_t l : len_) maxlen = std::max(maxlen, l);
  std::vector<int32_t> bucket(static_cast<size_t>(maxlen) + 2, 0);
  for (int32_t l : len_) bucket[static_cast<size_t>(l)]++;
  for (size_t i = 1; i < bucket.size(); ++i) bucket[i] += bucket[i - 1];
  std::vector<int32_t> order(ns);
  for (size_t s = ns; s-- > 0;) order[static_cast<size_t>(--bucket[static_cast<size_t>(len_[s])])] = static_cast<int32_t>(s);
  for (size_t i = ns; i-- > 0;) {
    int32_t s = order[i];
    int32_t l = link_[static_cast<size_t>(s)];
    if (l < 0) continue;
    cnt_[static_cast<size_t>(l)] += cnt_[static_cast<size_t>(s)];
    endpos_[static_cast<size_t>(l)] = std::max(endpos_[static_cast<size_t>(l)], endpos_[static_cast<size_t>(s)]);
  }
  // child lists
  const size_t k = static_cast<size_t>(std::max<int32_t>(keep, 1));
  prob_off_.assign(ns + 1, 0);
  bfs_off_.assign(ns + 1, 0);
  std::vector<Kid> tmp;
  std::vector<int32_t> endp;
  for (size_t s = 0; s < ns; ++s) {
    tmp.clear();
    for (int32_t e = first_edge_[s]; e >= 0; e = edges_[static_cast<size_t>(e)].next) {
      const Edge& ed = edges_[static_cast<size_t>(e)];
      if (ed.token == kSeparatorToken) continue;
      tmp.push_back(Kid{ed.to, ed.token, cnt_[static_cast<size_t>(ed.to)]});
    }
    size_t take = std::min(k, tmp.size());
    std::partial_sort(tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(take), tmp.end(),
                      [](const Kid& a, const Kid& b) {
                        return a.freq != b.freq ? a.freq > b.freq : a.token < b.token;
                      });
    prob_kids_.insert(prob_kids_.end(), tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(take));
    prob_off_[s + 1] = static_cast<int64_t>(prob_kids_.size());
    std::partial_sort(tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(take), tmp.end(),
                      [this](const Kid& a, const Kid& b) {
                        int32_t ea = endpos_[static_cast<size_t>(a.node)], eb = endpos_[static_cast<size_t>(b.node)];
                        return ea != eb ? ea > eb : a.token < b.token;
                      });
    bfs_kids_.insert(bfs_kids_.end(), tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(take));
    bfs_off_[s + 1] = static_cast<int64_t>(bfs_kids_.size());
  }
  // building-only data
  std::vector<int32_t>().swap(first_edge_);
  std::vector<int32_t>().swap(endpos_);
  std::vector<int64_t>().swap(cnt_);
}

void SuffixAutomaton::match(const int32_t* t, int64_t len, std::vector<std::pair<int32_t, int32_t>>* out) const {
  out->clear();
  int32_t s = 0;
  int64_t l = 0;
  for (int64_t i = 0; i < len; ++i) {
    const int32_t tok = t[i];
    for (;;) {
      int32_t nx = transition(s, tok);
      if (nx >= 0) {
        s = nx;
        l += 1;
        break;
      }
      if (s == 0) {
        l = 0;
        break;
      }
      s = link_[static_cast<size_t>(s)];
      l = std::min<int64_t>(l, len_[static_cast<size_t>(s)]);
    }
  }
  for (int32_t v = s; v > 0; v = link_[static_cast<size_t>(v)]) {
    l = std::min<int64_t>(l, len_[static_cast<size_t>(v)]);
    if (prob_off_[static_cast<size_t>(v) + 1] > prob_off_[static_cast<size_t>(v)]) {
      out->emplace_back(v, static_cast<int32_t>(l));
    }
  }
}

}  // namespace kcng

