// The n-gram corpus: trie + per-request match states + external automata + insert thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "draft.h"
#include "sam.h"
#include "trie.h"

namespace kcng {

enum class MatchType : int32_t { kBfs = 0, kProb = 1 };

struct CorpusParams {
  int32_t max_trie_depth = 18;
  int32_t min_bfs_breadth = 1;
  int32_t max_bfs_breadth = 8;
  int32_t draft_token_num = 8;
  MatchType match_type = MatchType::kBfs;
  int64_t capacity = 1000000;
  int32_t external_sam_budget = 0;
};

// Per-request incremental matching state (§2.5, with the §4.2 fix: anchors that may have
// changed since the state was saved are re-derived, so results always equal a fresh lookup).
struct MatchState {
  uint64_t epoch = 0;
  uint64_t created_snapshot = 0;
  int64_t processed = -1;
  std::vector<int32_t> anchor;   // anchor[k-1]: trie node of the last k tokens, 0 = absent
  std::vector<uint32_t> version;  // node versions of present anchors
  std::vector<int32_t> window;   // the last c tokens the anchors were built from
};

class NgramCorpusCore {
 public:
  explicit NgramCorpusCore(const CorpusParams& p);
  ~NgramCorpusCore();
  NgramCorpusCore(const NgramCorpusCore&) = delete;
  NgramCorpusCore& operator=(const NgramCorpusCore&) = delete;

  // Enqueue sequences (CSR) for insertion by the background thread.
  void async_insert(const int32_t* tokens, const int64_t* offsets, int64_t num_seqs);
  void synchronize();
  void batch_match(const int64_t* state_ids, const int32_t* tokens, const int64_t* offsets,
                   const int64_t* total_lens, int64_t num_reqs, int64_t* out_ids, int64_t* out_mask);
  void erase_match_states(const int64_t* ids, int64_t n);
  void reset();
  int64_t add_external_corpus(const std::string& id, const int32_t* tokens, int64_t n);
  void remove_external_corpus(const std::string& id);
  std::vector<std::pair<std::string, int64_t>> list_external_corpora();

  int64_t num_nodes();
  int64_t num_match_states();
  int64_t pending();
  double bytes_per_node() const { return trie_.bytes_per_node(); }
  int64_t reserved_bytes() const { return static_cast<int64_t>(trie_.reserved_bytes()); }
  // Testing hook: the insert thread fails on the next batch it processes.
  void fail_next_insert(const std::string& msg);

 private:
  struct InsertBatch {
    uint64_t generation;
    std::vector<int32_t> tokens;
    std::vector<int64_t> offsets;
  };
  void worker();
  void insert_batch_locked(const InsertBatch& batch);
  bool apply_next_batch_locked();  // pop + insert the oldest queued batch; caller holds mu_
  void rethrow_pending_error();
  void compute_anchors(MatchState* st, const int32_t* t, int64_t L, int64_t total_len);
  void match_one(MatchState* st, const int32_t* t, int64_t L, int64_t total_len, int64_t* ids, int64_t* mask);

  const CorpusParams p_;
  DraftParams dp_;

  // mu_ protects the trie, match states, external corpora, epoch and scratch buffers.
  std::mutex mu_;
  Trie trie_;
  uint64_t epoch_ = 1;
  std::unordered_map<int64_t, MatchState> states_;
  std::unordered_map<std::string, std::shared_ptr<const SuffixAutomaton>> externals_;
  DraftTree tree_, tree2_;
  DraftScratch scratch_;
  DraftResult res_a_, res_b_, res_c_;
  std::vector<Anchor> anchors_;
  std::vector<std::pair<int32_t, int32_t>> sam_anchors_;

  // qmu_ protects the insert queue, pending counter, generation, error and stop flag.
  // Lock order: mu_ before qmu_.
  std::mutex qmu_;
  std::condition_variable q_cv_;
  std::condition_variable done_cv_;
  std::deque<InsertBatch> queue_;
  int64_t pending_ = 0;
  uint64_t generation_ = 0;  // bumped by reset(): batches queued earlier are dropped
  bool stop_ = false;
  std::string error_;
  bool has_error_ = false;
  std::string fail_next_;
  bool fail_armed_ = false;
  std::thread thread_;
};

}  // namespace kcng
