// tvm-ffi entry points of tree_speculative_sampling_target_only (G3 semantics).
//
// Every argument is validated here, before anything is launched, in the same order and with the
// same messages as the Python API's checks (kernelcache/kernels/speculative_sampling.py,
// `_validate`), raised as TypeError / ValueError through tvm-ffi.  Launches go to the caller's
// current stream (tvm-ffi environment stream).
//
//   tree_speculative_sampling_target_only_auto(11 tensors, ts, ta, det)
//       what the Python API calls: the split count is chosen here (SM count cached per
//       device; eager calls and graph captures may choose differently, the results are the
//       same bits); the workspace, when the split path needs one, comes from the caller's tensor
//       allocator (torch's caching allocator, through tvm-ffi's environment allocator), so
//       it is stream-ordered and CUDA-graph-capture safe like torch.empty.  One split: one
//       fused launch and no workspace.
//   tree_speculative_sampling_target_only(11 tensors, ts, ta, det, workspace, num_splits)
//       explicit workspace and split count (benchmarks, callers without an env allocator).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "tree_sampling.cuh"

namespace {

using tvm::ffi::TensorView;
namespace ts = kernelcache::tree_sampling;

constexpr const char* kFn = "tree_speculative_sampling_target_only: ";
// must match _TARGET_BLOCKS_PER_SM in kernelcache/kernels/speculative_sampling.py
constexpr int64_t kTargetBlocksPerSm = 2;
// must match _EAGER_FUSED_MAX_CHUNKS / _EAGER_FUSED_MAX_WORK there (H200 sweep, RESULTS.md)
constexpr int64_t kEagerFusedMaxChunks = 48;   // chunks per row
constexpr int64_t kEagerFusedMaxWork = 3072;   // bs * chunks
// the fused kernel keeps the tree and the chunk sums in dynamic shared memory up to this size
constexpr size_t kFusedSmemLimit = 32 * 1024;

// Python's repr of a shape tuple: "(2, 3)", "(5,)", "()".
std::string py_tuple(const int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + (n == 1 ? ",)" : ")");
}
std::string py_shape(const TensorView& t) { return py_tuple(t.shape().data(), t.ndim()); }

// str(torch.dtype) for the dtypes torch exchanges through DLPack.
std::string torch_dtype_str(DLDataType d) {
  const char* name = nullptr;
  if (d.lanes == 1) {
    switch (d.code) {
      case kDLInt:
        name = d.bits == 8 ? "int8" : d.bits == 16 ? "int16" : d.bits == 32 ? "int32" : d.bits == 64 ? "int64" : nullptr;
        break;
      case kDLUInt:
        name = d.bits == 8 ? "uint8" : d.bits == 16 ? "uint16" : d.bits == 32 ? "uint32" : d.bits == 64 ? "uint64" : nullptr;
        break;
      case kDLFloat:
        name = d.bits == 16 ? "float16" : d.bits == 32 ? "float32" : d.bits == 64 ? "float64" : nullptr;
        break;
      case kDLBfloat:
        name = d.bits == 16 ? "bfloat16" : nullptr;
        break;
      case kDLBool:
        name = "bool";
        break;
      case kDLComplex:
        name = d.bits == 64 ? "complex64" : d.bits == 128 ? "complex128" : nullptr;
        break;
      default:
        break;
    }
  }
  if (name) return std::string("torch.") + name;
  return "<dtype code " + std::to_string(d.code) + " bits " + std::to_string(d.bits) + " lanes " +
         std::to_string(d.lanes) + ">";
}

// str(torch.device): "cpu", "cuda:0", ...
std::string torch_device_str(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda:" + std::to_string(d.device_id);
    default:
      return "<device type " + std::to_string(static_cast<int>(d.device_type)) + " id " +
             std::to_string(d.device_id) + ">";
  }
}

struct Named {
  const TensorView* t;
  const char* name;
  uint8_t code;
  uint8_t bits;
  int ndim;  // -1: checked separately (predicts)
};

// The checks of the Python API's _validate, after the type / threshold checks that only Python
// can do, in the same order with the same messages.  Returns (bs, N, S, V).
struct Dims {
  int64_t bs, N, S, V;
};

Dims validate(const Named (&named)[11]) {
  for (const Named& a : named) {
    DLDataType d = a.t->dtype();
    if (d.code != a.code || d.bits != a.bits || d.lanes != 1) {
      TVM_FFI_THROW(TypeError) << kFn << a.name << " must be " << torch_dtype_str(DLDataType{a.code, a.bits, 1})
                               << ", got " << torch_dtype_str(d);
    }
  }
  for (const Named& a : named) {
    if (a.ndim >= 0 && a.t->ndim() != a.ndim) {
      TVM_FFI_THROW(ValueError) << kFn << a.name << " must be " << a.ndim << "-D, got shape " << py_shape(*a.t);
    }
  }
  const TensorView& predicts = *named[0].t;
  if (predicts.ndim() != 1) {
    TVM_FFI_THROW(ValueError) << kFn << "predicts must be 1-D, got shape " << py_shape(predicts);
  }
  const TensorView& candidates = *named[3].t;
  Dims d{candidates.size(0), candidates.size(1), named[1].t->size(1), named[9].t->size(2)};
  const int64_t bsN[2] = {d.bs, d.N};
  const int64_t bsS[2] = {d.bs, d.S};
  const int64_t bsNV[3] = {d.bs, d.N, d.V};
  for (int i = 1; i < 11; ++i) {
    if (i == 3) continue;  // candidates defines bs and N
    const int64_t* want = i == 1 ? bsS : (i == 2 || i == 8) ? bsN : (i >= 9 ? bsNV : bsN);
    const int n = (i == 2 || i == 8) ? 1 : (i >= 9 ? 3 : 2);
    const TensorView& t = *named[i].t;
    bool ok = t.ndim() == n;
    for (int k = 0; ok && k < n; ++k) ok = t.size(k) == want[k];
    if (!ok) {
      TVM_FFI_THROW(ValueError) << kFn << named[i].name << " must have shape " << py_tuple(want, n) << " (bs=" << d.bs
                                << ", N=" << d.N << ", S=" << d.S << ", V=" << d.V << "), got " << py_shape(t);
    }
  }
  if (predicts.size(0) < d.bs * d.N) {
    TVM_FFI_THROW(ValueError) << kFn << "predicts has " << predicts.size(0) << " elements, needs at least bs*N = "
                              << d.bs * d.N;
  }
  if (d.bs > 0 && (d.N <= 0 || d.S <= 0 || d.V <= 0)) {
    TVM_FFI_THROW(ValueError) << kFn << "need N, S, V > 0, got N=" << d.N << " S=" << d.S << " V=" << d.V;
  }
  if (d.N > INT32_MAX || d.S > INT32_MAX || d.V > INT32_MAX) {
    TVM_FFI_THROW(ValueError) << kFn << "N, S and V must each be < 2^31";
  }
  for (const Named& a : named) {
    if (!a.t->IsContiguous()) TVM_FFI_THROW(ValueError) << kFn << a.name << " must be contiguous";
  }
  const DLDevice dev = named[9].t->device();
  for (const Named& a : named) {
    const DLDevice td = a.t->device();
    if (td.device_type != kDLCUDA) {
      TVM_FFI_THROW(ValueError) << kFn << a.name << " must be a CUDA tensor, got device " << torch_device_str(td);
    }
    if (td.device_id != dev.device_id || dev.device_type != kDLCUDA) {
      TVM_FFI_THROW(ValueError) << kFn << a.name << " is on " << torch_device_str(td) << " but target_probs is on "
                                << torch_device_str(dev);
    }
  }
  return d;
}

void validate_thresholds(double threshold_single, double threshold_acc) {
  // (the Python API checks these first, with Python's float formatting)
  if (!(threshold_single >= 0.0 && threshold_single <= 1.0)) {
    TVM_FFI_THROW(ValueError) << kFn << "threshold_single must be in [0, 1], got " << threshold_single;
  }
  if (!(threshold_acc >= 0.0 && threshold_acc <= 1.0)) {
    TVM_FFI_THROW(ValueError) << kFn << "threshold_acc must be in [0, 1], got " << threshold_acc;
  }
}

template <typename T>
T* ptr_of(const TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

int64_t num_chunks_for(int64_t vocab) { return (vocab + ts::kChunk - 1) / ts::kChunk; }

// Launch options (benchmark levers; defaults are what the H200 measurements chose).
std::atomic<bool> g_pdl{true};                 // programmatic dependent launch of kernel 2
std::atomic<int64_t> g_eager_fused_chunks{kEagerFusedMaxChunks};

// Mirrors choose_num_splits() of the Python module.  Kernel time: enough blocks to fill the
// GPU (kTargetBlocksPerSm per SM), one per request once the batch alone fills it, at most one
// per chunk.  Eager (not capturing a graph): one fused launch whenever a row has at most
// g_eager_fused_chunks chunks and the batch at most kEagerFusedMaxWork chunks in all, since
// there the second launch costs more host time than the split saves GPU time.
int64_t auto_num_splits(int64_t bs, int64_t vocab, int64_t num_sms, bool eager) {
  if (bs <= 0 || vocab <= 0) return 1;
  const int64_t chunks = num_chunks_for(vocab);
  const int64_t sms = std::max<int64_t>(num_sms, 1);
  if (bs >= sms) return 1;
  if (eager && chunks <= g_eager_fused_chunks.load(std::memory_order_relaxed) && bs * chunks <= kEagerFusedMaxWork) {
    return 1;
  }
  const int64_t want = (kTargetBlocksPerSm * sms + bs - 1) / bs;
  return std::max<int64_t>(1, std::min(chunks, want));
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unknown: the choice that is best for graphs
  }
  return st != cudaStreamCaptureStatusNone;
}

int64_t num_sms_of(int device_id) {
  static std::atomic<int> cache[64] = {};
  if (device_id < 0 || device_id >= 64) device_id = 0;
  int n = cache[device_id].load(std::memory_order_relaxed);
  if (n <= 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device_id) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      TVM_FFI_THROW(RuntimeError) << kFn << "cannot query the SM count of cuda:" << device_id;
    }
    cache[device_id].store(n, std::memory_order_relaxed);
  }
  return n;
}

// A workspace from the caller's environment allocator (torch's caching allocator when called
// from Python with torch tensors); released (stream-ordered) when the call returns.
class EnvWorkspace {
 public:
  EnvWorkspace(int64_t numel, DLDevice dev) {
    DLPackManagedTensorAllocator alloc = TVMFFIEnvGetDLPackManagedTensorAllocator();
    if (alloc == nullptr) {
      TVM_FFI_THROW(RuntimeError) << kFn << "no tensor allocator in the calling environment; pass a workspace to "
                                     "tree_speculative_sampling_target_only(..., workspace, num_splits)";
    }
    int64_t shape[1] = {numel};
    DLTensor proto{};
    proto.device = dev;
    proto.ndim = 1;
    proto.dtype = DLDataType{kDLInt, 64, 1};
    proto.shape = shape;
    std::string err;
    const int rc = (*alloc)(&proto, &mt_, &err, [](void* ctx, const char* kind, const char* msg) {
      *static_cast<std::string*>(ctx) = std::string(kind) + ": " + msg;
    });
    if (rc != 0 || mt_ == nullptr) {
      mt_ = nullptr;
      TVM_FFI_THROW(RuntimeError) << kFn << "workspace allocation of " << numel << " int64 failed: " << err;
    }
  }
  ~EnvWorkspace() {
    if (mt_ != nullptr && mt_->deleter != nullptr) mt_->deleter(mt_);
  }
  EnvWorkspace(const EnvWorkspace&) = delete;
  EnvWorkspace& operator=(const EnvWorkspace&) = delete;
  int64_t* data() const {
    return reinterpret_cast<int64_t*>(static_cast<char*>(mt_->dl_tensor.data) + mt_->dl_tensor.byte_offset);
  }

 private:
  DLManagedTensorVersioned* mt_ = nullptr;
};

struct Launch {
  ts::Params P;
  int64_t splits;  // 1 with fused == true
  bool fused;
  int vec;
  bool staged;
  size_t smem;
};

// Fills the kernel parameters (all but the workspace pointers) for `num_splits` blocks per
// request; num_splits == 1 selects the fused kernel when its shared memory fits.
Launch plan(const Named (&named)[11], const Dims& d, double threshold_single, double threshold_acc,
            int64_t num_splits) {
  Launch L{};
  const int64_t chunks = num_chunks_for(d.V);
  const int64_t want = std::min(num_splits, chunks);
  const int64_t per_block = (chunks + want - 1) / want;
  L.splits = (chunks + per_block - 1) / per_block;
  if (d.bs * L.splits > INT32_MAX || d.bs > INT32_MAX) {
    TVM_FFI_THROW(ValueError) << kFn << "bs * num_splits too large";
  }
  L.staged = d.N <= ts::kMaxSmemNodes;
  const size_t tree_smem = L.staged ? static_cast<size_t>(d.N) * (8 + 4 * 6) : 0;
  const size_t slices_off = (tree_smem + 15) / 16 * 16;
  const size_t fused_smem = slices_off + static_cast<size_t>(chunks) * sizeof(ts::SliceSum);
  L.fused = L.splits == 1 && fused_smem <= kFusedSmemLimit;
  L.smem = L.fused ? fused_smem : tree_smem;

  ts::Params& P = L.P;
  P.predicts = ptr_of<int32_t>(*named[0].t);
  P.accept_index = ptr_of<int32_t>(*named[1].t);
  P.accept_token_num = ptr_of<int32_t>(*named[2].t);
  P.candidates = ptr_of<const int64_t>(*named[3].t);
  P.retrive_index = ptr_of<const int64_t>(*named[4].t);
  P.retrive_next_token = ptr_of<const int64_t>(*named[5].t);
  P.retrive_next_sibling = ptr_of<const int64_t>(*named[6].t);
  P.uniform_samples = ptr_of<const float>(*named[7].t);
  P.uniform_final = ptr_of<const float>(*named[8].t);
  P.target_probs = ptr_of<const float>(*named[9].t);
  P.draft_probs = ptr_of<float>(*named[10].t);
  P.walk = nullptr;
  P.slices = nullptr;
  P.predicts_len = named[0].t->size(0);
  P.bs = d.bs;
  P.num_nodes = static_cast<int32_t>(d.N);
  P.num_spec = static_cast<int32_t>(d.S);
  P.vocab = static_cast<int32_t>(d.V);
  P.num_splits = static_cast<int32_t>(L.splits);
  P.chunks_per_block = static_cast<int32_t>(L.fused ? chunks : per_block);
  P.num_chunks = static_cast<int32_t>(chunks);
  P.threshold_single = static_cast<float>(threshold_single);
  P.threshold_acc = fmaxf(static_cast<float>(threshold_acc), 1e-9f);
  P.fused_slices_offset = static_cast<int32_t>(slices_off);

  // Vector width: gcd(4, V), reduced further if a row base is not aligned to it.
  int vec = (d.V % 4 == 0) ? 4 : (d.V % 2 == 0) ? 2 : 1;
  auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  while (vec > 1 && !(aligned(P.target_probs, vec * 4) && aligned(P.draft_probs, vec * 4))) vec /= 2;
  L.vec = vec;
  return L;
}

template <int VEC>
cudaError_t launch_vec(const Launch& L, bool deterministic, cudaStream_t stream) {
  const ts::Params& P = L.P;
  const unsigned bs = static_cast<unsigned>(P.bs);
  if (L.fused) {
    auto k = L.staged ? (deterministic ? ts::fused_kernel<VEC, true, true> : ts::fused_kernel<VEC, true, false>)
                      : (deterministic ? ts::fused_kernel<VEC, false, true> : ts::fused_kernel<VEC, false, false>);
    k<<<dim3(bs), dim3(ts::kWalkThreads), L.smem, stream>>>(P);
    return cudaGetLastError();
  }
  auto wk = L.staged ? ts::walk_and_slice_kernel<VEC, true> : ts::walk_and_slice_kernel<VEC, false>;
  auto pk = deterministic ? ts::pick_kernel<VEC, true> : ts::pick_kernel<VEC, false>;
  wk<<<dim3(static_cast<unsigned>(P.bs * L.splits)), dim3(ts::kWalkThreads), L.smem, stream>>>(P);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(bs);
  cfg.blockDim = dim3(ts::kPickThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  err = g_pdl.load(std::memory_order_relaxed) ? cudaLaunchKernelEx(&cfg, pk, P) : cudaErrorNotSupported;
  if (err != cudaSuccess) {  // no PDL: plain launch (pick_kernel's wait is then a no-op)
    cudaGetLastError();
    pk<<<dim3(bs), dim3(ts::kPickThreads), 0, stream>>>(P);
    err = cudaGetLastError();
  }
  return err;
}

void run(const Launch& L, DLDevice dev, bool deterministic) {
  cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id));
  int prev_device = -1;
  cudaGetDevice(&prev_device);
  if (prev_device != dev.device_id) cudaSetDevice(dev.device_id);
  cudaError_t err = L.vec == 4 ? launch_vec<4>(L, deterministic, stream)
                    : L.vec == 2 ? launch_vec<2>(L, deterministic, stream)
                                 : launch_vec<1>(L, deterministic, stream);
  if (prev_device >= 0 && prev_device != dev.device_id) cudaSetDevice(prev_device);
  if (err != cudaSuccess) {
    TVM_FFI_THROW(RuntimeError) << kFn << "CUDA launch failed: " << cudaGetErrorString(err);
  }
}

#define KC_TS_NAMED                                                                       \
  const Named named[11] = {                                                               \
      {&predicts, "predicts", kDLInt, 32, -1},                                            \
      {&accept_index, "accept_index", kDLInt, 32, 2},                                     \
      {&accept_token_num, "accept_token_num", kDLInt, 32, 1},                             \
      {&candidates, "candidates", kDLInt, 64, 2},                                         \
      {&retrive_index, "retrive_index", kDLInt, 64, 2},                                   \
      {&retrive_next_token, "retrive_next_token", kDLInt, 64, 2},                         \
      {&retrive_next_sibling, "retrive_next_sibling", kDLInt, 64, 2},                     \
      {&uniform_samples, "uniform_samples", kDLFloat, 32, 2},                             \
      {&uniform_samples_for_final_sampling, "uniform_samples_for_final_sampling", kDLFloat, 32, 1}, \
      {&target_probs, "target_probs", kDLFloat, 32, 3},                                   \
      {&draft_probs, "draft_probs", kDLFloat, 32, 3},                                     \
  }

}  // namespace

// Number of int64 workspace elements for (bs, vocab): 4 per request (walk result) plus one per
// chunk of 1024 vocabulary entries per request.
int64_t tree_speculative_sampling_workspace_numel(int64_t bs, int64_t vocab) {
  if (bs < 0 || vocab <= 0) {
    TVM_FFI_THROW(ValueError) << "tree_speculative_sampling_workspace_numel: need bs >= 0 and vocab > 0";
  }
  return bs * (4 + num_chunks_for(vocab));
}

// The split count the _auto entry point uses for (bs, vocab) on a GPU with num_sms SMs, eager
// (no graph capture on the stream) or while capturing.
int64_t tree_speculative_sampling_num_splits(int64_t bs, int64_t vocab, int64_t num_sms, bool eager) {
  return auto_num_splits(bs, vocab, num_sms, eager);
}

// Benchmark levers (process-wide): pdl 0/1 (programmatic dependent launch of kernel 2),
// eager_fused_chunks (eager calls fuse into one launch up to this many 1024-entry chunks per
// row); a negative value leaves a setting unchanged.  Returns the settings in force.
tvm::ffi::Array<int64_t> tree_speculative_sampling_launch_options(int64_t pdl, int64_t eager_fused_chunks) {
  if (pdl >= 0) g_pdl.store(pdl != 0);
  if (eager_fused_chunks >= 0) g_eager_fused_chunks.store(eager_fused_chunks);
  return {g_pdl.load() ? 1 : 0, g_eager_fused_chunks.load()};
}

// Whether this call has a tensor allocator in its environment (what the _auto entry point
// allocates its workspace with); `probe` is any tensor of the caller's framework.
bool tree_speculative_sampling_has_env_allocator(TensorView probe) {
  (void)probe;
  return TVMFFIEnvGetDLPackManagedTensorAllocator() != nullptr;
}

void tree_speculative_sampling_target_only_auto(
    TensorView predicts, TensorView accept_index, TensorView accept_token_num, TensorView candidates,
    TensorView retrive_index, TensorView retrive_next_token, TensorView retrive_next_sibling,
    TensorView uniform_samples, TensorView uniform_samples_for_final_sampling, TensorView target_probs,
    TensorView draft_probs, double threshold_single, double threshold_acc, bool deterministic) {
  validate_thresholds(threshold_single, threshold_acc);
  KC_TS_NAMED;
  const Dims d = validate(named);
  if (d.bs == 0) return;
  const DLDevice dev = target_probs.device();
  const int64_t sms = num_sms_of(dev.device_id);
  int64_t splits = auto_num_splits(d.bs, d.V, sms, false);
  if (splits > 1 && auto_num_splits(d.bs, d.V, sms, true) == 1) {  // eager would fuse: capturing?
    if (!stream_is_capturing(static_cast<cudaStream_t>(TVMFFIEnvGetStream(dev.device_type, dev.device_id)))) {
      splits = 1;
    }
  }
  Launch L = plan(named, d, threshold_single, threshold_acc, splits);
  if (L.fused) {
    run(L, dev, deterministic);
    return;
  }
  EnvWorkspace ws(d.bs * (4 + num_chunks_for(d.V)), dev);
  L.P.walk = reinterpret_cast<ts::WalkResult*>(ws.data());
  L.P.slices = reinterpret_cast<ts::SliceSum*>(ws.data() + 4 * d.bs);
  run(L, dev, deterministic);
}

void tree_speculative_sampling_target_only(
    TensorView predicts, TensorView accept_index, TensorView accept_token_num, TensorView candidates,
    TensorView retrive_index, TensorView retrive_next_token, TensorView retrive_next_sibling,
    TensorView uniform_samples, TensorView uniform_samples_for_final_sampling, TensorView target_probs,
    TensorView draft_probs, double threshold_single, double threshold_acc, bool deterministic,
    TensorView workspace, int64_t num_splits) {
  validate_thresholds(threshold_single, threshold_acc);
  KC_TS_NAMED;
  const Dims d = validate(named);
  if (workspace.dtype().code != kDLInt || workspace.dtype().bits != 64 || workspace.dtype().lanes != 1) {
    TVM_FFI_THROW(TypeError) << kFn << "workspace must be torch.int64, got " << torch_dtype_str(workspace.dtype());
  }
  if (workspace.device().device_type != kDLCUDA || workspace.device().device_id != target_probs.device().device_id) {
    TVM_FFI_THROW(ValueError) << kFn << "workspace is on " << torch_device_str(workspace.device())
                              << " but target_probs is on " << torch_device_str(target_probs.device());
  }
  if (!workspace.IsContiguous()) TVM_FFI_THROW(ValueError) << kFn << "workspace must be contiguous";
  if (num_splits <= 0) {
    TVM_FFI_THROW(ValueError) << kFn << "num_splits must be > 0, got " << num_splits;
  }
  if (d.bs == 0) return;
  const int64_t ws_need = d.bs * (4 + num_chunks_for(d.V));
  if (workspace.numel() < ws_need) {
    TVM_FFI_THROW(ValueError) << kFn << "workspace has " << workspace.numel() << " int64 elements, needs " << ws_need;
  }
  Launch L = plan(named, d, threshold_single, threshold_acc, num_splits);
  int64_t* ws = ptr_of<int64_t>(workspace);
  L.P.walk = reinterpret_cast<ts::WalkResult*>(ws);
  L.P.slices = reinterpret_cast<ts::SliceSum*>(ws + 4 * d.bs);
  run(L, target_probs.device(), deterministic);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_target_only, tree_speculative_sampling_target_only);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_target_only_auto, tree_speculative_sampling_target_only_auto);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_workspace_numel, tree_speculative_sampling_workspace_numel);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_num_splits, tree_speculative_sampling_num_splits);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_has_env_allocator, tree_speculative_sampling_has_env_allocator);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tree_speculative_sampling_launch_options, tree_speculative_sampling_launch_options);
