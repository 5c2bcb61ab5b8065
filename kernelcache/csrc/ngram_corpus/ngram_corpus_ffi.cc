// tvm-ffi binding: a reference-counted object "kernelcache.NgramCorpus" whose methods are
// registered through reflection, created by the exported factory `ngram_corpus_create`.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "corpus.h"

namespace {

namespace ffi = tvm::ffi;

template <class T>
const T* tensor_ptr(const ffi::TensorView& t, const char* what, uint8_t code, uint8_t bits) {
  if (t.device().device_type != kDLCPU) TVM_FFI_THROW(ValueError) << what << " must be a CPU tensor";
  if (t.ndim() != 1) TVM_FFI_THROW(ValueError) << what << " must be 1-D, got ndim=" << t.ndim();
  if (t.dtype().code != code || t.dtype().bits != bits || t.dtype().lanes != 1) {
    TVM_FFI_THROW(TypeError) << what << " has the wrong dtype";
  }
  if (t.size(0) > 1 && t.stride(0) != 1) TVM_FFI_THROW(ValueError) << what << " must be contiguous";
  return reinterpret_cast<const T*>(static_cast<const char*>(t.data_ptr()) + t.byte_offset());
}

template <class T>
T* tensor_mut_ptr(const ffi::TensorView& t, const char* what, uint8_t code, uint8_t bits) {
  return const_cast<T*>(tensor_ptr<T>(t, what, code, bits));
}

const int32_t* i32(const ffi::TensorView& t, const char* what) { return tensor_ptr<int32_t>(t, what, kDLInt, 32); }
const int64_t* i64(const ffi::TensorView& t, const char* what) { return tensor_ptr<int64_t>(t, what, kDLInt, 64); }

// Checks that offsets are a valid CSR over a token array of length ntok.
void check_offsets(const int64_t* off, int64_t n_plus_1, int64_t ntok) {
  if (n_plus_1 < 1) TVM_FFI_THROW(ValueError) << "offsets must have at least one entry";
  if (off[0] < 0) TVM_FFI_THROW(ValueError) << "offsets must start at >= 0";
  for (int64_t i = 1; i < n_plus_1; ++i) {
    if (off[i] < off[i - 1]) TVM_FFI_THROW(ValueError) << "offsets must be non-decreasing";
  }
  if (off[n_plus_1 - 1] > ntok) TVM_FFI_THROW(ValueError) << "offsets exceed the token array";
}

class NgramCorpusObj : public ffi::Object {
 public:
  explicit NgramCorpusObj(const kcng::CorpusParams& p) : core_(std::make_unique<kcng::NgramCorpusCore>(p)) {}

  void async_insert(ffi::TensorView tokens, ffi::TensorView offsets) {
    const int32_t* tok = i32(tokens, "tokens");
    const int64_t* off = i64(offsets, "offsets");
    check_offsets(off, offsets.size(0), tokens.size(0));
    core_->async_insert(tok, off, offsets.size(0) - 1);
  }

  void synchronize() { core_->synchronize(); }

  void batch_match(ffi::TensorView state_ids, ffi::TensorView tokens, ffi::TensorView offsets,
                   ffi::TensorView total_lens, ffi::TensorView out_ids, ffi::TensorView out_mask) {
    const int64_t* sid = i64(state_ids, "state_ids");
    const int32_t* tok = i32(tokens, "tokens");
    const int64_t* off = i64(offsets, "offsets");
    const int64_t* tl = i64(total_lens, "total_lens");
    int64_t* oi = tensor_mut_ptr<int64_t>(out_ids, "out_ids", kDLInt, 64);
    int64_t* om = tensor_mut_ptr<int64_t>(out_mask, "out_mask", kDLInt, 64);
    const int64_t n = state_ids.size(0);
    if (offsets.size(0) != n + 1) TVM_FFI_THROW(ValueError) << "offsets must have len(state_ids) + 1 entries";
    if (total_lens.size(0) != n) TVM_FFI_THROW(ValueError) << "total_lens must have len(state_ids) entries";
    check_offsets(off, n + 1, tokens.size(0));
    const int64_t d = draft_token_num_;
    if (out_ids.size(0) < n * d) TVM_FFI_THROW(ValueError) << "out_ids is too small";
    if (out_mask.size(0) < n * d * d) TVM_FFI_THROW(ValueError) << "out_mask is too small";
    core_->batch_match(sid, tok, off, tl, n, oi, om);
  }

  void erase_match_state(ffi::TensorView ids) { core_->erase_match_states(i64(ids, "state_ids"), ids.size(0)); }

  void reset() { core_->reset(); }

  int64_t add_external_corpus(ffi::String id, ffi::TensorView tokens) {
    const int32_t* tok = i32(tokens, "tokens");
    return core_->add_external_corpus(std::string(id), tok, tokens.size(0));
  }

  void remove_external_corpus(ffi::String id) { core_->remove_external_corpus(std::string(id)); }

  // [id0, count0, id1, count1, ...] in the native map's iteration order.
  ffi::Array<ffi::Any> list_external_corpora() {
    ffi::Array<ffi::Any> out;
    for (auto& kv : core_->list_external_corpora()) {
      out.push_back(ffi::String(kv.first));
      out.push_back(kv.second);
    }
    return out;
  }

  int64_t num_nodes() { return core_->num_nodes(); }
  int64_t num_match_states() { return core_->num_match_states(); }
  int64_t pending() { return core_->pending(); }
  double bytes_per_node() { return core_->bytes_per_node(); }
  int64_t reserved_bytes() { return core_->reserved_bytes(); }
  int64_t node_struct_bytes() { return static_cast<int64_t>(sizeof(kcng::TrieNode)); }
  void debug_fail_next_insert(ffi::String msg) { core_->fail_next_insert(std::string(msg)); }

  int64_t draft_token_num_ = 0;

  static constexpr bool _type_mutable = true;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("kernelcache.NgramCorpus", NgramCorpusObj, ffi::Object);

 private:
  std::unique_ptr<kcng::NgramCorpusCore> core_;
};

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<NgramCorpusObj>(refl::init(false))
      .def("async_insert", &NgramCorpusObj::async_insert)
      .def("synchronize", &NgramCorpusObj::synchronize)
      .def("batch_match", &NgramCorpusObj::batch_match)
      .def("erase_match_state", &NgramCorpusObj::erase_match_state)
      .def("reset", &NgramCorpusObj::reset)
      .def("add_external_corpus", &NgramCorpusObj::add_external_corpus)
      .def("remove_external_corpus", &NgramCorpusObj::remove_external_corpus)
      .def("list_external_corpora", &NgramCorpusObj::list_external_corpora)
      .def("num_nodes", &NgramCorpusObj::num_nodes)
      .def("num_match_states", &NgramCorpusObj::num_match_states)
      .def("pending", &NgramCorpusObj::pending)
      .def("bytes_per_node", &NgramCorpusObj::bytes_per_node)
      .def("reserved_bytes", &NgramCorpusObj::reserved_bytes)
      .def("node_struct_bytes", &NgramCorpusObj::node_struct_bytes)
      .def("debug_fail_next_insert", &NgramCorpusObj::debug_fail_next_insert);
}

int32_t narrow(int64_t v, const char* what) {
  if (v < INT32_MIN || v > INT32_MAX) TVM_FFI_THROW(ValueError) << what << " is out of range";
  return static_cast<int32_t>(v);
}

ffi::ObjectRef ngram_corpus_create(int64_t max_trie_depth, int64_t min_bfs_breadth, int64_t max_bfs_breadth,
                                   int64_t draft_token_num, int64_t match_type, int64_t capacity,
                                   int64_t external_sam_budget) {
  kcng::CorpusParams p;
  p.max_trie_depth = narrow(max_trie_depth, "max_trie_depth");
  p.min_bfs_breadth = narrow(min_bfs_breadth, "min_bfs_breadth");
  p.max_bfs_breadth = narrow(max_bfs_breadth, "max_bfs_breadth");
  p.draft_token_num = narrow(draft_token_num, "draft_token_num");
  if (match_type != 0 && match_type != 1) TVM_FFI_THROW(ValueError) << "match_type must be 0 (BFS) or 1 (PROB)";
  p.match_type = static_cast<kcng::MatchType>(match_type);
  p.capacity = capacity;
  p.external_sam_budget = narrow(external_sam_budget, "external_sam_budget");
  if (p.draft_token_num > 4096) TVM_FFI_THROW(ValueError) << "draft_token_num must be <= 4096";
  if (capacity < 2 || capacity > INT32_MAX - 1) TVM_FFI_THROW(ValueError) << "capacity must be in [2, 2^31-2]";
  try {
    auto obj = ffi::make_object<NgramCorpusObj>(p);
    obj->draft_token_num_ = p.draft_token_num;
    return ffi::ObjectRef(obj);
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(ngram_corpus_create, ngram_corpus_create);
