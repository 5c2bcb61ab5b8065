// Suffix automaton over an external corpus (spec ngram_corpus.md §2.9).
#pragma once

#include <cstdint>
#include <vector>

#include "common.h"

namespace kcng {

// A child of a draft source node, as consumed by the drafting procedures.
struct Kid {
  int32_t node;
  int32_t token;
  int64_t freq;
};

class SuffixAutomaton {
 public:
  // Build from the whole token stream (separators are ordinary tokens while building) and
  // precompute per-state child lists (separator transitions excluded), keeping the first
  // `keep` entries of each (drafting never looks further than max_bfs_breadth children).
  SuffixAutomaton(const int32_t* tokens, int64_t n, int32_t keep);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_states() const { return static_cast<int64_t>(len_.size()); }

  // Anchors for a tail (§2.9): (state, matched length), longest first, expandable only.
  void match(const int32_t* t, int64_t len, std::vector<std::pair<int32_t, int32_t>>* out) const;

  // Children by occurrence count desc, token asc (PROB) / by last end position desc, token asc (BFS).
  const Kid* prob_begin(int32_t s) const { return prob_kids_.data() + prob_off_[s]; }
  const Kid* prob_end(int32_t s) const { return prob_kids_.data() + prob_off_[s + 1]; }
  const Kid* bfs_begin(int32_t s) const { return bfs_kids_.data() + bfs_off_[s]; }
  const Kid* bfs_end(int32_t s) const { return bfs_kids_.data() + bfs_off_[s + 1]; }

 private:
  struct Edge {
    int32_t token;
    int32_t to;
    int32_t next;
  };
  struct Slot {
    int32_t state;
    int32_t token;
    int32_t edge_plus1;  // 0 = empty
  };
  int32_t find_edge(int32_t s, int32_t tok) const;
  int32_t transition(int32_t s, int32_t tok) const {
    int32_t e = find_edge(s, tok);
    return e < 0 ? -1 : edges_[static_cast<size_t>(e)].to;
  }
  void add_edge(int32_t s, int32_t tok, int32_t to);
  void grow_table();
  int32_t new_state(int32_t len, int32_t link, int64_t cnt, int32_t endpos);
  void extend(int32_t tok, int32_t pos);
  void finalize(int32_t keep);

  int64_t num_tokens_ = 0;
  std::vector<int32_t> len_, link_, first_edge_, endpos_;
  std::vector<int64_t> cnt_;
  std::vector<Edge> edges_;
  std::vector<Slot> table_;
  size_t mask_ = 0;
  size_t table_used_ = 0;
  int32_t last_ = 0;
  std::vector<int64_t> prob_off_, bfs_off_;
  std::vector<Kid> prob_kids_, bfs_kids_;
};

}  // namespace kcng
