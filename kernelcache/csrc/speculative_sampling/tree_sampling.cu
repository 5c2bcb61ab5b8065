// tvm-ffi entry point of tree_speculative_sampling_target_only (G3 semantics).
// Validates every argument (raising ValueError / TypeError through tvm-ffi before any launch)
// and launches on the caller's current stream (tvm-ffi environment stream).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "tree_sampling.cuh"

namespace {

using tvm::ffi::TensorView;
namespace ts = kernelcache::tree_sampling;

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(t.size(i));
  }
  return s + "]";
}

std::string dtype_str(DLDataType d) {
  const char* code = d.code == kDLInt ? "int" : d.code == kDLUInt ? "uint" : d.code == kDLFloat ? "float"
                     : d.code == kDLBfloat ? "bfloat" : d.code == kDLBool ? "bool" : "other";
  return std::string(code) + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
}

void check_dtype(const TensorView& t, const char* name, uint8_t code, uint8_t bits) {
  DLDataType d = t.dtype();
  if (d.code != code || d.bits != bits || d.lanes != 1) {
    DLDataType want{code, bits, 1};
    TVM_FFI_THROW(TypeError) << "tree_speculative_sampling_target_only: " << name << " must be "
                             << dtype_str(want) << ", got " << dtype_str(d);
  }
}

void check_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> shape) {
  bool ok = t.ndim() == static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    if (!ok) break;
    ok = t.size(i++) == s;
  }
  if (!ok) {
    std::string want = "[";
    int k = 0;
    for (int64_t s : shape) want += (k++ ? ", " : "") + std::to_string(s);
    want += "]";
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: " << name << " must have shape "
                              << want << ", got " << shape_str(t);
  }
}

void check_contiguous(const TensorView& t, const char* name) {
  if (!t.IsContiguous()) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: " << name
                              << " must be contiguous";
  }
}

void check_device(const TensorView& t, const char* name, DLDevice dev) {
  DLDevice d = t.device();
  if (d.device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: " << name
                              << " must be a CUDA tensor (device_type " << static_cast<int>(d.device_type)
                              << ")";
  }
  if (d.device_id != dev.device_id) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: " << name << " is on cuda:"
                              << d.device_id << " but the other tensors are on cuda:" << dev.device_id;
  }
}

template <typename T>
T* ptr_of(const TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

int64_t num_chunks_for(int64_t vocab) { return (vocab + ts::kChunk - 1) / ts::kChunk; }

}  // namespace

// Number of int64 workspace elements for (bs, vocab): 4 per request (walk result) plus one per
// chunk of 1024 vocabulary entries per request.
int64_t tree_speculative_sampling_workspace_numel(int64_t bs, int64_t vocab) {
  if (bs < 0 || vocab <= 0) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_workspace_numel: need bs >= 0 and vocab > 0";
  }
  return bs * (4 + num_chunks_for(vocab));
}

void tree_speculative_sampling_target_only(
    TensorView predicts, TensorView accept_index, TensorView accept_token_num, TensorView candidates,
    TensorView retrive_index, TensorView retrive_next_token, TensorView retrive_next_sibling,
    TensorView uniform_samples, TensorView uniform_samples_for_final_sampling, TensorView target_probs,
    TensorView draft_probs, double threshold_single, double threshold_acc, bool deterministic,
    TensorView workspace, int64_t num_splits) {
  // --- shapes -------------------------------------------------------------------------
  if (candidates.ndim() != 2) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: candidates must be 2-D [bs, N], got "
                              << shape_str(candidates);
  }
  if (target_probs.ndim() != 3) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: target_probs must be 3-D [bs, N, V], got "
                              << shape_str(target_probs);
  }
  if (accept_index.ndim() != 2) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: accept_index must be 2-D [bs, S], got "
                              << shape_str(accept_index);
  }
  const int64_t bs = candidates.size(0);
  const int64_t N = candidates.size(1);
  const int64_t S = accept_index.size(1);
  const int64_t V = target_probs.size(2);
  check_shape(accept_index, "accept_index", {bs, S});
  check_shape(accept_token_num, "accept_token_num", {bs});
  check_shape(retrive_index, "retrive_index", {bs, N});
  check_shape(retrive_next_token, "retrive_next_token", {bs, N});
  check_shape(retrive_next_sibling, "retrive_next_sibling", {bs, N});
  check_shape(uniform_samples, "uniform_samples", {bs, N});
  check_shape(uniform_samples_for_final_sampling, "uniform_samples_for_final_sampling", {bs});
  check_shape(target_probs, "target_probs", {bs, N, V});
  check_shape(draft_probs, "draft_probs", {bs, N, V});
  if (predicts.ndim() != 1) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: predicts must be 1-D, got "
                              << shape_str(predicts);
  }
  if (predicts.size(0) < bs * N) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: predicts has " << predicts.size(0)
                              << " elements, needs at least bs*N = " << bs * N;
  }
  if (bs > 0 && (N <= 0 || S <= 0 || V <= 0)) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: need N > 0, S > 0 and V > 0, got N="
                              << N << " S=" << S << " V=" << V;
  }
  if (N > INT32_MAX || S > INT32_MAX || V > INT32_MAX) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: N, S and V must each be < 2^31";
  }
  // --- dtypes -------------------------------------------------------------------------
  check_dtype(predicts, "predicts", kDLInt, 32);
  check_dtype(accept_index, "accept_index", kDLInt, 32);
  check_dtype(accept_token_num, "accept_token_num", kDLInt, 32);
  check_dtype(candidates, "candidates", kDLInt, 64);
  check_dtype(retrive_index, "retrive_index", kDLInt, 64);
  check_dtype(retrive_next_token, "retrive_next_token", kDLInt, 64);
  check_dtype(retrive_next_sibling, "retrive_next_sibling", kDLInt, 64);
  check_dtype(uniform_samples, "uniform_samples", kDLFloat, 32);
  check_dtype(uniform_samples_for_final_sampling, "uniform_samples_for_final_sampling", kDLFloat, 32);
  check_dtype(target_probs, "target_probs", kDLFloat, 32);
  check_dtype(draft_probs, "draft_probs", kDLFloat, 32);
  check_dtype(workspace, "workspace", kDLInt, 64);
  // --- device / layout ----------------------------------------------------------------
  const DLDevice dev = target_probs.device();
  const std::pair<const TensorView*, const char*> all[] = {
      {&predicts, "predicts"},
      {&accept_index, "accept_index"},
      {&accept_token_num, "accept_token_num"},
      {&candidates, "candidates"},
      {&retrive_index, "retrive_index"},
      {&retrive_next_token, "retrive_next_token"},
      {&retrive_next_sibling, "retrive_next_sibling"},
      {&uniform_samples, "uniform_samples"},
      {&uniform_samples_for_final_sampling, "uniform_samples_for_final_sampling"},
      {&target_probs, "target_probs"},
      {&draft_probs, "draft_probs"},
      {&workspace, "workspace"},
  };
  for (const auto& [t, name] : all) check_device(*t, name, dev);
  for (const auto& [t, name] : all) check_contiguous(*t, name);
  // --- scalars ------------------------------------------------------------------------
  if (!(threshold_single >= 0.0 && threshold_single <= 1.0)) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: threshold_single must be in [0, 1], got "
                              << threshold_single;
  }
  if (!(threshold_acc >= 0.0 && threshold_acc <= 1.0)) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: threshold_acc must be in [0, 1], got "
                              << threshold_acc;
  }
  if (num_splits <= 0) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: num_splits must be > 0, got "
                              << num_splits;
  }
  if (bs == 0) return;

  const int64_t chunks = num_chunks_for(V);
  const int64_t per_block = (chunks + std::min(num_splits, chunks) - 1) / std::min(num_splits, chunks);
  const int64_t splits = (chunks + per_block - 1) / per_block;
  const int64_t ws_need = bs * (4 + chunks);
  if (workspace.numel() < ws_need) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: workspace has " << workspace.numel()
                              << " int64 elements, needs " << ws_need;
  }
  if (bs * splits > INT32_MAX || bs > INT32_MAX) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_target_only: bs * num_splits too large";
  }

  ts::Params P;
  P.predicts = ptr_of<int32_t>(predicts);
  P.accept_index = ptr_of<int32_t>(accept_index);
  P.accept_token_num = ptr_of<int32_t>(accept_token_num);
  P.candidates = ptr_of<const int64_t>(candidates);
  P.retrive_index = ptr_of<const int64_t>(retrive_index);
  P.retrive_next_token = ptr_of<const int64_t>(retrive_next_token);
  P.retrive_next_sibling = ptr_of<const int64_t>(retrive_next_sibling);
  P.uniform_samples = ptr_of<const float>(uniform_samples);
  P.uniform_final = ptr_of<const float>(uniform_samples_for_final_sampling);
  P.target_probs = ptr_of<const float>(target_probs);
  P.draft_probs = ptr_of<float>(draft_probs);
  int64_t* ws = ptr_of<int64_t>(workspace);
  P.walk = reinterpret_cast<ts::WalkResult*>(ws);
  P.slices = reinterpret_cast<ts::SliceSum*>(ws + 4 * bs);
  P.predicts_len = predicts.size(0);
  P.bs = bs;
  P.num_nodes = static_cast<int32_t>(N);
  P.num_spec = static_cast<int32_t>(S);
  P.vocab = static_cast<int32_t>(V);
  P.num_splits = static_cast<int32_t>(splits);
  P.chunks_per_block = static_cast<int32_t>(per_block);
  P.num_chunks = static_cast<int32_t>(chunks);
  P.threshold_single = static_cast<float>(threshold_single);
  P.threshold_acc = fmaxf(static_cast<float>(threshold_acc), 1e-9f);

  // Vector width: gcd(4, V), reduced further if a row base is not aligned to it.
  int vec = (V % 4 == 0) ? 4 : (V % 2 == 0) ? 2 : 1;
  auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  while (vec > 1 && !(aligned(P.target_probs, vec * 4) && aligned(P.draft_probs, vec * 4))) vec /= 2;

  const bool staged = N <= ts::kMaxSmemNodes;
  const size_t smem = staged ? static_cast<size_t>(N) * (8 + 4 * 6) : 0;

  cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  int prev_device = -1;
  cudaGetDevice(&prev_device);
  if (prev_device != dev.device_id) cudaSetDevice(dev.device_id);

  auto launch = [&](auto walk_kernel, auto pick_kernel) {
    walk_kernel<<<dim3(static_cast<unsigned>(bs * splits)), dim3(ts::kWalkThreads), smem, stream>>>(P);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(bs));
    cfg.blockDim = dim3(ts::kPickThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, pick_kernel, P);
    if (err != cudaSuccess) {  // no PDL: plain launch (pick_kernel's wait is then a no-op)
      cudaGetLastError();
      pick_kernel<<<dim3(static_cast<unsigned>(bs)), dim3(ts::kPickThreads), 0, stream>>>(P);
      err = cudaGetLastError();
    }
    return err;
  };

  cudaError_t err = cudaSuccess;
#define KC_TS_LAUNCH(VEC)                                                                        \
  do {                                                                                            \
    auto wk = staged ? ts::walk_and_slice_kernel<VEC, true> : ts::walk_and_slice_kernel<VEC, false>; \
    auto pk = deterministic ? ts::pick_kernel<VEC, true> : ts::pick_kernel<VEC, false>;          \
    err = launch(wk, pk);                                                                         \
  } while (0)
  if (vec == 4) KC_TS_LAUNCH(4);
  else if (vec == 2) KC_TS_LAUNCH(2);
  else KC_TS_LAUNCH(1);
#undef KC_TS_LAUNCH

  if (prev_device >= 0 && prev_device != dev.device_id) cudaSetDevice(prev_device);
  if (err != cudaSuccess) {
    TVM_FFI_THROW(RuntimeError) << "tree_speculative_sampling_target_only: CUDA launch failed: "
                                << cudaGetErrorString(err);
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_target_only, tree_speculative_sampling_target_only);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_workspace_numel,
                              tree_speculative_sampling_workspace_numel);
