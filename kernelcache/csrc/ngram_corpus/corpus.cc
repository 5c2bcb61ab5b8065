#include "corpus.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kcng {

NgramCorpusCore::NgramCorpusCore(const CorpusParams& p)
    : p_(p), trie_(p.capacity, p.max_trie_depth) {
  if (p.max_trie_depth <= 1) throw std::invalid_argument("max_trie_depth must be greater than 1");
  if (p.min_bfs_breadth <= 0) throw std::invalid_argument("min_bfs_breadth must be greater than 0");
  if (p.min_bfs_breadth > p.max_bfs_breadth) {
    throw std::invalid_argument("min_bfs_breadth must be less than or equal to max_bfs_breadth");
  }
  if (p.draft_token_num <= 0) throw std::invalid_argument("draft_token_num must be greater than 0");
  if (p.capacity <= p.max_trie_depth) throw std::invalid_argument("capacity must be greater than max_trie_depth");
  if (p.external_sam_budget < 0) throw std::invalid_argument("external_sam_budget must be >= 0");
  dp_ = DraftParams{p.max_trie_depth, p.min_bfs_breadth, p.max_bfs_breadth};
  thread_ = std::thread([this] { worker(); });
}

NgramCorpusCore::~NgramCorpusCore() {
  {
    std::lock_guard<std::mutex> g(qmu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NgramCorpusCore::rethrow_pending_error() {
  std::string msg;
  {
    std::lock_guard<std::mutex> g(qmu_);
    if (!has_error_) return;
    msg.swap(error_);
    has_error_ = false;
  }
  throw std::runtime_error("ngram corpus insert thread failed: " + msg);
}

void NgramCorpusCore::fail_next_insert(const std::string& msg) {
  std::lock_guard<std::mutex> g(qmu_);
  fail_next_ = msg;
  fail_armed_ = true;
}

void NgramCorpusCore::insert_batch_locked(const InsertBatch& batch) {
  // caller holds mu_
  try {
    std::string injected;
    {
      std::lock_guard<std::mutex> gq(qmu_);
      if (fail_armed_) {
        fail_armed_ = false;
        injected.swap(fail_next_);
      }
    }
    if (!injected.empty()) throw std::runtime_error(injected);
    if (batch.generation == generation_) {
      const size_t ns = batch.offsets.size() - 1;
      for (size_t i = 0; i < ns; ++i) {
        trie_.insert_sequence(batch.tokens.data() + batch.offsets[i], batch.offsets[i + 1] - batch.offsets[i]);
      }
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> gq(qmu_);
    if (!has_error_) error_ = e.what();
    has_error_ = true;
  } catch (...) {
    std::lock_guard<std::mutex> gq(qmu_);
    if (!has_error_) error_ = "unknown error";
    has_error_ = true;
  }
}

// Items are popped while holding mu_ (then qmu_), so popping and inserting are one step with
// respect to every other mu_ holder: batches are applied in FIFO order whoever applies them.
bool NgramCorpusCore::apply_next_batch_locked() {
  InsertBatch batch;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    if (stop_ || queue_.empty()) return false;  // drained by synchronize() or reset()
    batch = std::move(queue_.front());
    queue_.pop_front();
  }
  insert_batch_locked(batch);
  std::lock_guard<std::mutex> lk(qmu_);
  pending_ -= 1;
  if (pending_ == 0) done_cv_.notify_all();
  return true;
}

void NgramCorpusCore::worker() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(qmu_);
      q_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
    }
    std::lock_guard<std::mutex> g(mu_);
    apply_next_batch_locked();
  }
}

void NgramCorpusCore::async_insert(const int32_t* tokens, const int64_t* offsets, int64_t num_seqs) {
  rethrow_pending_error();
  if (num_seqs <= 0) return;
  InsertBatch b;
  const int64_t base = offsets[0];
  const int64_t total = offsets[num_seqs] - base;
  if (total <= 0) return;  // only empty sequences
  b.tokens.assign(tokens + base, tokens + base + total);
  b.offsets.resize(static_cast<size_t>(num_seqs) + 1);
  for (int64_t i = 0; i <= num_seqs; ++i) b.offsets[static_cast<size_t>(i)] = offsets[i] - base;
  {
    std::lock_guard<std::mutex> g(qmu_);
    b.generation = generation_;
    queue_.push_back(std::move(b));
    pending_ += 1;
  }
  q_cv_.notify_one();
}

void NgramCorpusCore::synchronize() {
  {
    // Apply what is queued in the calling thread instead of waiting for a thread hand-off.
    std::lock_guard<std::mutex> g(mu_);
    while (apply_next_batch_locked()) {
    }
  }
  {
    std::unique_lock<std::mutex> lk(qmu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
  }
  rethrow_pending_error();
}

int64_t NgramCorpusCore::pending() {
  std::lock_guard<std::mutex> g(qmu_);
  return pending_;
}

void NgramCorpusCore::reset() {
  rethrow_pending_error();
  std::lock_guard<std::mutex> g(mu_);
  {
    std::lock_guard<std::mutex> gq(qmu_);
    generation_ += 1;
    pending_ -= static_cast<int64_t>(queue_.size());
    queue_.clear();
    if (pending_ == 0) done_cv_.notify_all();
  }
  trie_.clear();
  states_.clear();
  epoch_ += 1;
}

int64_t NgramCorpusCore::num_nodes() {
  std::lock_guard<std::mutex> g(mu_);
  return trie_.used();
}

int64_t NgramCorpusCore::num_match_states() {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<int64_t>(states_.size());
}

void NgramCorpusCore::erase_match_states(const int64_t* ids, int64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  for (int64_t i = 0; i < n; ++i) states_.erase(ids[i]);
}

int64_t NgramCorpusCore::add_external_corpus(const std::string& id, const int32_t* tokens, int64_t n) {
  rethrow_pending_error();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (externals_.count(id)) throw std::runtime_error("External corpus '" + id + "' already exists");
  }
  // Built without the lock: lookups and inserts continue meanwhile.
  auto sam = std::make_shared<const SuffixAutomaton>(tokens, n, p_.max_bfs_breadth);
  std::lock_guard<std::mutex> g(mu_);
  if (externals_.count(id)) throw std::runtime_error("External corpus '" + id + "' already exists");
  externals_.emplace(id, std::move(sam));
  return n;
}

void NgramCorpusCore::remove_external_corpus(const std::string& id) {
  std::lock_guard<std::mutex> g(mu_);
  externals_.erase(id);
}

std::vector<std::pair<std::string, int64_t>> NgramCorpusCore::list_external_corpora() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& kv : externals_) out.emplace_back(kv.first, kv.second->num_tokens());
  return out;
}

void NgramCorpusCore::compute_anchors(MatchState* st, const int32_t* t, int64_t L, int64_t total_len) {
  const int64_t m = std::min<int64_t>(L, p_.max_trie_depth);
  const uint64_t created = trie_.created();
  bool adv = st->epoch == epoch_ && st->processed >= 0 && total_len >= st->processed;
  int64_t app = 0;
  if (adv) {
    app = total_len - st->processed;
    const int64_t c = static_cast<int64_t>(st->window.size());
    if (app >= m || c < m - app) {
      adv = false;
    } else {
      const int64_t q = m - app;
      adv = std::memcmp(st->window.data() + (c - q), t + (L - app - q), static_cast<size_t>(q) * sizeof(int32_t)) == 0;
    }
  }
  // new anchors go to the back halves of the state's vectors while the old ones are read
  std::vector<int32_t>& anc = st->anchor;
  std::vector<uint32_t>& ver = st->version;
  const size_t old_n = adv ? anc.size() : 0;
  anc.resize(old_n + static_cast<size_t>(m));
  ver.resize(old_n + static_cast<size_t>(m));
  const bool unchanged = adv && created == st->created_snapshot;
  for (int64_t k = 1; k <= m; ++k) {
    int32_t node;
    if (adv && k > app) {
      const size_t j = static_cast<size_t>(k - app - 1);
      const int32_t old = anc[j];
      if (old != 0 && trie_.node(old).version == ver[j]) {
        node = trie_.walk(old, t + (L - app), app);
      } else if (old == 0 && unchanged) {
        node = 0;
      } else {
        node = trie_.walk(0, t + (L - k), k);
      }
    } else {
      node = trie_.walk(0, t + (L - k), k);
    }
    anc[old_n + static_cast<size_t>(k - 1)] = node;
    ver[old_n + static_cast<size_t>(k - 1)] = node ? trie_.node(node).version : 0;
  }
  if (old_n) {
    anc.erase(anc.begin(), anc.begin() + static_cast<std::ptrdiff_t>(old_n));
    ver.erase(ver.begin(), ver.begin() + static_cast<std::ptrdiff_t>(old_n));
  }
  st->window.assign(t + (L - m), t + L);
  st->epoch = epoch_;
  st->processed = total_len;
  st->created_snapshot = created;
}

void NgramCorpusCore::match_one(MatchState* st, const int32_t* t, int64_t L, int64_t total_len, int64_t* ids,
                                int64_t* mask) {
  const int32_t d = p_.draft_token_num;
  const int32_t last = t[L - 1];
  compute_anchors(st, t, L, total_len);
  anchors_.clear();
  for (size_t k = st->anchor.size(); k-- > 0;) {
    const int32_t a = st->anchor[k];
    if (a != 0 && trie_.node(a).first_child != 0) anchors_.push_back(Anchor{a, static_cast<int32_t>(k + 1)});
  }
  const int32_t total = d - 1;
  const int32_t n_ext = static_cast<int32_t>(externals_.size());
  const int32_t sam_budget = std::min(p_.external_sam_budget, total);
  const int32_t per = n_ext > 0 ? sam_budget / n_ext : 0;
  const bool use_ext = n_ext > 0 && sam_budget > 0 && per > 0;
  const int32_t trie_budget = use_ext ? total - per * n_ext : total;

  TrieSource ts{&trie_};
  tree_.reset(last);
  if (p_.match_type == MatchType::kBfs) draft_bfs(ts, anchors_, trie_budget, dp_, &tree_, &scratch_);
  else draft_prob(ts, anchors_, trie_budget, dp_, &tree_, &scratch_);
  if (!use_ext) {
    assemble(tree_, d, &res_a_, &scratch_.ints);
    write_result(res_a_, d, ids, mask);
    return;
  }
  assemble(tree_, trie_budget + 1, &res_a_, &scratch_.ints);
  const int64_t m = std::min<int64_t>(L, p_.max_trie_depth);
  DraftResult* running = &res_a_;
  DraftResult* spare = &res_c_;
  for (const auto& kv : externals_) {
    const SuffixAutomaton& sam = *kv.second;
    sam.match(t + (L - m), m, &sam_anchors_);
    anchors_.clear();
    for (const auto& a : sam_anchors_) anchors_.push_back(Anchor{a.first, a.second});
    SamSource ss{&sam};
    tree_.reset(last);
    if (p_.match_type == MatchType::kBfs) draft_bfs(ss, anchors_, per, dp_, &tree_, &scratch_);
    else draft_prob(ss, anchors_, per, dp_, &tree_, &scratch_);
    assemble(tree_, per + 1, &res_b_, &scratch_.ints);
    merge_results(*running, res_b_, d, &tree2_, spare, &scratch_.ints);
    std::swap(running, spare);
  }
  write_result(*running, d, ids, mask);
}

void NgramCorpusCore::batch_match(const int64_t* state_ids, const int32_t* tokens, const int64_t* offsets,
                                  const int64_t* total_lens, int64_t num_reqs, int64_t* out_ids, int64_t* out_mask) {
  rethrow_pending_error();
  const int64_t d = p_.draft_token_num;
  for (int64_t r = 0; r < num_reqs; ++r) {
    if (offsets[r + 1] - offsets[r] <= 0) throw std::runtime_error("batchMatch received an empty token tail");
  }
  std::lock_guard<std::mutex> g(mu_);
  for (int64_t r = 0; r < num_reqs; ++r) {
    MatchState& st = states_[state_ids[r]];
    match_one(&st, tokens + offsets[r], offsets[r + 1] - offsets[r], total_lens[r], out_ids + r * d,
              out_mask + r * d * d);
  }
}

}  // namespace kcng
