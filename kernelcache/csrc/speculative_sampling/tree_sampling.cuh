// Tree speculative sampling, target-only (behaviour "G3" of docs/specs/tree_speculative_sampling.md).
//
// Written from the spec for kernelcache.  Two kernels per call when a request's row is split
// over several blocks (small batches), one fused kernel when it is not:
//
//   kernel 1  grid = bs * num_splits blocks of kWalkThreads threads.
//             Every block of request b loads the request's tree into shared memory (one
//             parallel round of loads), gathers the target probability of every node under its
//             parent (a second parallel round), then one thread runs the acceptance walk from
//             shared memory.  Block (b, 0) writes predicts / accept_index / accept_token_num and
//             the walk result; every block writes the draft_probs side effect of the rejected
//             tokens that fall in its vocabulary range, then sums the residual of its range in
//             chunks of kChunk entries (one warp per chunk) into the workspace.
//   kernel 2  grid = bs blocks of kPickThreads threads (programmatic dependent launch where
//             available).  Warp 0 adds the chunk sums in a fixed order (lane-sequential runs
//             of kPer chunks, then a shuffle scan), finds the first chunk whose running sum
//             exceeds u = coin * total and the block scans that chunk with FlashInfer's
//             DeviceSamplingFromProb; writes the bonus / correction token.
//   fused     grid = bs blocks (num_splits == 1): kernel 1's body with the chunk sums in shared
//             memory, a barrier, then kernel 2's body.  No workspace, one launch.
//
// The row is read from HBM once (kernel 1); kernel 2 re-reads one chunk.  Splitting a row
// across blocks keeps the GPU busy for small batches with large vocabularies.
//
// Robustness: node ids outside [0, N) end a list, token ids outside [0, V) have probability 0
// (never accepted, no draft write), sibling loops are bounded by N steps per level, slots
// outside [0, predicts_len) are not written, and every offset is 64-bit.
#pragma once

#include <cuda_runtime.h>
#include <flashinfer/sampling.cuh>

#include <cstdint>

namespace kernelcache {
namespace tree_sampling {

constexpr int kWalkThreads = 256;   // threads of kernel 1 (8 warps)
constexpr int kWalkMinBlocks = 4;  // kernel-1 blocks per SM the register budget must allow
constexpr int kPickThreads = 256;   // threads of kernel 2
constexpr int kChunk = 1024;        // vocabulary chunk summed by one warp (= kPickThreads * 4)
constexpr int kMaxSmemNodes = 1024; // trees up to this many nodes are staged in shared memory

// Per-request walk result, kept in the int64 workspace (4 slots per request).
struct WalkResult {
  int64_t row;       // local node whose target row the final token is drawn from
  int64_t n;         // accepted draft tokens
  int64_t last;      // global slot that receives the final token
  int64_t last_rej;  // G3: last rejected candidate with p > 0 at the final level, or -1
};

// Per-(request, chunk) residual summary (one int64 slot).
struct SliceSum {
  float sum;          // sum of the positive residual entries of the chunk
  int32_t last_valid; // largest vocabulary index in the chunk with residual > 0, or -1
};

struct Params {
  int32_t* predicts;
  int32_t* accept_index;
  int32_t* accept_token_num;
  const int64_t* candidates;
  const int64_t* retrive_index;
  const int64_t* retrive_next_token;
  const int64_t* retrive_next_sibling;
  const float* uniform_samples;
  const float* uniform_final;
  const float* target_probs;
  float* draft_probs;
  WalkResult* walk;  // [bs]
  SliceSum* slices;  // [bs * num_chunks]
  int64_t predicts_len;
  int64_t bs;
  int32_t num_nodes;  // N
  int32_t num_spec;   // S
  int32_t vocab;      // V
  int32_t num_splits;        // blocks per request in kernel 1
  int32_t chunks_per_block;  // chunks of kChunk entries per kernel-1 block
  int32_t num_chunks;        // ceil(V / kChunk)
  float threshold_single;
  float threshold_acc;  // already capped to >= 1e-9f
  int32_t fused_slices_offset;  // fused kernel: byte offset of the chunk sums in dynamic smem
};

__device__ __forceinline__ int32_t clamp_node(int64_t v, int32_t n) {
  return (v >= 0 && v < n) ? static_cast<int32_t>(v) : -1;
}
__device__ __forceinline__ int32_t clamp_token(int64_t v, int32_t vocab) {
  return (v >= 0 && v < vocab) ? static_cast<int32_t>(v) : -1;
}

template <int VEC>
struct FVec {
  float v[VEC];
};

template <int VEC>
__device__ __forceinline__ FVec<VEC> load_vec(const float* p) {
  FVec<VEC> r;
  if constexpr (VEC == 4) {
    float4 x = *reinterpret_cast<const float4*>(p);
    r.v[0] = x.x; r.v[1] = x.y; r.v[2] = x.z; r.v[3] = x.w;
  } else if constexpr (VEC == 2) {
    float2 x = *reinterpret_cast<const float2*>(p);
    r.v[0] = x.x; r.v[1] = x.y;
  } else {
    r.v[0] = *p;
  }
  return r;
}

// Residual vector at vocabulary offset j (j % VEC == 0, j + VEC <= V).  Entries that are not
// strictly positive count as 0 (fmaxf also maps NaN to 0 in the non-bonus case).
template <int VEC>
__device__ __forceinline__ FVec<VEC> residual_vec(const float* trow, const float* drow, bool bonus,
                                                  int64_t j) {
  FVec<VEC> t = load_vec<VEC>(trow + j);
  if (!bonus) {
    FVec<VEC> d = load_vec<VEC>(drow + j);
#pragma unroll
    for (int k = 0; k < VEC; ++k) t.v[k] = fmaxf(t.v[k] - d.v[k], 0.0f);
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) t.v[k] = (t.v[k] > 0.0f) ? t.v[k] : 0.0f;
  return t;
}

// Chunk sums of one final row over chunks [chunk_lo, chunk_hi): one warp per chunk.  Each lane
// owns kSteps vectors of the chunk (stride 32 * VEC); the lane adds its entries in (step, k)
// order, then a fixed butterfly combines the lanes, so the sums are repeatable.
//
// Memory-level parallelism: the loads of kBatch steps (half a chunk: 16 floats per lane per
// row) are issued together, unconditionally (an index past V is clamped to an in-bounds
// address and its value masked afterwards), before any of them is used; a guarded load per
// step would make every warp wait a full memory latency per step.
template <int VEC, bool BONUS>
__device__ __forceinline__ void slice_sums(const Params& P, const float* __restrict__ trow,
                                           const float* __restrict__ drow, SliceSum* out,
                                           int32_t chunk_lo, int32_t chunk_hi) {
  constexpr int kSteps = kChunk / (32 * VEC);
  constexpr int kBatch = kSteps >= 2 ? kSteps / 2 : 1;
  static_assert(kSteps % kBatch == 0, "batch must divide the steps");
  const int32_t V = P.vocab;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int32_t c = chunk_lo + warp; c < chunk_hi; c += kWalkThreads / 32) {
    const int64_t cbase = static_cast<int64_t>(c) * kChunk;
    const bool full = cbase + kChunk <= static_cast<int64_t>(V);  // warp-uniform
    const int64_t base = cbase + lane * VEC;
    float sum = 0.0f;
    int last_valid = -1;
#pragma unroll
    for (int h = 0; h < kSteps; h += kBatch) {
      FVec<VEC> t[kBatch];
      FVec<VEC> d[kBatch];
      if (full) {
        const float* tp = trow + base + h * 32 * VEC;
        const float* dp = drow + base + h * 32 * VEC;
#pragma unroll
        for (int it = 0; it < kBatch; ++it) {
          t[it] = load_vec<VEC>(tp + it * 32 * VEC);
          if constexpr (!BONUS) d[it] = load_vec<VEC>(dp + it * 32 * VEC);
        }
      } else {
#pragma unroll
        for (int it = 0; it < kBatch; ++it) {
          const int64_t j = base + (h + it) * 32 * VEC;
          const int64_t js = j < V ? j : static_cast<int64_t>(V) - VEC;  // VEC divides V
          t[it] = load_vec<VEC>(trow + js);
          if constexpr (!BONUS) d[it] = load_vec<VEC>(drow + js);
        }
      }
#pragma unroll
      for (int it = 0; it < kBatch; ++it) {
        const int64_t j = base + (h + it) * 32 * VEC;
        const bool in = full || j < V;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          float x = t[it].v[k];
          if constexpr (!BONUS) x = fmaxf(x - d[it].v[k], 0.0f);
          x = (in && x > 0.0f) ? x : 0.0f;
          sum += x;
          if (x > 0.0f) last_valid = static_cast<int>(j + k);
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
      last_valid = max(last_valid, __shfl_xor_sync(0xffffffffu, last_valid, off));
    }
    if (lane == 0) out[c] = SliceSum{sum, last_valid};
  }
}

// ------------------------------------------------------------------------------------------
// Kernel 1 body: walk + draft side effect + per-chunk residual sums of block (b, split).
// FUSED: the only block of request b (one split); the walk result stays in s_walk and the
// chunk sums go to `slices` in shared memory, for pick_block in the same kernel.
// ------------------------------------------------------------------------------------------
template <int VEC, bool STAGED, bool FUSED>
__device__ __forceinline__ void walk_and_slice_block(const Params& P, int64_t b, int32_t split,
                                                     unsigned char* smem_raw, WalkResult& s_walk,
                                                     SliceSum* slices) {
  const int tid = threadIdx.x;
  const int32_t N = P.num_nodes;
  const int32_t V = P.vocab;
  const int32_t chunk_lo = split * P.chunks_per_block;
  const int32_t chunk_hi = min(chunk_lo + P.chunks_per_block, P.num_chunks);
  const int64_t slice_lo = static_cast<int64_t>(chunk_lo) * kChunk;
  const int64_t slice_hi = min(static_cast<int64_t>(chunk_hi) * kChunk, static_cast<int64_t>(V));
  const int64_t node_base = b * N;  // offset of request b in the [bs, N] tensors
  const float* target_req = P.target_probs + node_base * V;
  float* draft_req = P.draft_probs + node_base * V;

  // Shared-memory staging of the tree (STAGED only).
  int64_t* s_ridx = reinterpret_cast<int64_t*>(smem_raw);
  int32_t* s_next = reinterpret_cast<int32_t*>(s_ridx + (STAGED ? N : 0));
  int32_t* s_sib = s_next + (STAGED ? N : 0);
  int32_t* s_tok = s_sib + (STAGED ? N : 0);
  int32_t* s_parent = s_tok + (STAGED ? N : 0);
  float* s_coin = reinterpret_cast<float*>(s_parent + (STAGED ? N : 0));
  float* s_prob = s_coin + (STAGED ? N : 0);

  if constexpr (STAGED) {
    for (int i = tid; i < N; i += kWalkThreads) {
      s_ridx[i] = P.retrive_index[node_base + i];
      s_next[i] = clamp_node(P.retrive_next_token[node_base + i], N);
      s_sib[i] = clamp_node(P.retrive_next_sibling[node_base + i], N);
      s_tok[i] = clamp_token(P.candidates[node_base + i], V);
      s_coin[i] = P.uniform_samples[node_base + i];
      s_parent[i] = -1;
    }
    __syncthreads();
    // parent of each node (for a well-formed tree it is unique; for a malformed one any
    // writer wins and the walk re-reads from global memory when it does not match).
    for (int x = tid; x < N; x += kWalkThreads) {
      int32_t c = s_next[x];
      for (int32_t steps = 0; c != -1 && steps < N; ++steps) {
        s_parent[c] = x;
        c = s_sib[c];
      }
    }
    __syncthreads();
    for (int c = tid; c < N; c += kWalkThreads) {
      const int32_t x = s_parent[c];
      const int32_t tok = s_tok[c];
      s_prob[c] = (x >= 0 && tok >= 0) ? target_req[static_cast<int64_t>(x) * V + tok] : 0.0f;
    }
    __syncthreads();
  }

  if (tid == 0) {
    auto next_of = [&](int32_t i) -> int32_t {
      if constexpr (STAGED) return s_next[i];
      else return clamp_node(P.retrive_next_token[node_base + i], N);
    };
    auto sib_of = [&](int32_t i) -> int32_t {
      if constexpr (STAGED) return s_sib[i];
      else return clamp_node(P.retrive_next_sibling[node_base + i], N);
    };
    auto tok_of = [&](int32_t i) -> int32_t {
      if constexpr (STAGED) return s_tok[i];
      else return clamp_token(P.candidates[node_base + i], V);
    };
    auto coin_of = [&](int32_t i) -> float {
      if constexpr (STAGED) return s_coin[i];
      else return P.uniform_samples[node_base + i];
    };
    auto ridx_of = [&](int32_t i) -> int64_t {
      if constexpr (STAGED) return s_ridx[i];
      else return P.retrive_index[node_base + i];
    };
    auto prob_of = [&](int32_t row, int32_t c, int32_t tok) -> float {
      if (tok < 0) return 0.0f;
      if constexpr (STAGED) {
        if (s_parent[c] == row) return s_prob[c];
      }
      return target_req[static_cast<int64_t>(row) * V + tok];
    };
    const bool writer = (split == 0);

    int32_t row = 0;
    float coin = coin_of(0);
    int64_t last = ridx_of(0);
    int64_t last_rej = -1;
    int32_t n = 0;
    if (writer) P.accept_index[b * P.num_spec] = static_cast<int32_t>(last);
    int32_t cur = 0;
    for (int32_t depth = 1; depth < P.num_spec; ++depth) {
      cur = next_of(cur);
      float prob_acc = 0.0f;
      bool accepted = false;
      last_rej = -1;  // only the final level's rejections matter for the fallback
      for (int32_t steps = 0; cur != -1 && steps < N; ++steps) {
        const int32_t tok = tok_of(cur);
        const float p = prob_of(row, cur, tok);
        prob_acc = __fadd_rn(prob_acc, p);
        const bool accept =
            (p > 0.0f) && ((coin < __fdiv_rn(prob_acc, P.threshold_acc)) || (p >= P.threshold_single));
        if (accept) {
          const int64_t slot = ridx_of(cur);
          if (writer) {
            if (last >= 0 && last < P.predicts_len) P.predicts[last] = tok;
            P.accept_index[b * P.num_spec + n + 1] = static_cast<int32_t>(slot);
          }
          ++n;
          last = slot;
          row = cur;
          coin = coin_of(cur);
          accepted = true;
          break;
        }
        if (tok >= 0) {
          if (p > 0.0f) last_rej = tok;
          if (tok >= slice_lo && tok < slice_hi) {
            draft_req[static_cast<int64_t>(row) * V + tok] = p;  // == target_probs[b,row,tok]
          }
        }
        cur = sib_of(cur);
      }
      if (!accepted) break;
      last_rej = -1;
    }
    s_walk.row = row;
    s_walk.n = n;
    s_walk.last = last;
    s_walk.last_rej = last_rej;
    if (writer) {
      P.accept_token_num[b] = n;
      if constexpr (!FUSED) P.walk[b] = WalkResult{row, n, last, last_rej};
    }
  }
  __syncthreads();
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  if constexpr (!FUSED) asm volatile("griddepcontrol.launch_dependents;");
#endif

  // Residual over this block's chunks of the final row: one warp per chunk, lanes add their
  // entries sequentially, then a fixed butterfly over the warp (repeatable sums).  BONUS is
  // block-uniform, so the draft row is not even addressed when it is not needed.
  const int64_t row = s_walk.row;
  const float* trow = target_req + row * V;
  const float* drow = draft_req + row * V;
  if (s_walk.n == P.num_spec - 1) {
    slice_sums<VEC, true>(P, trow, drow, slices, chunk_lo, chunk_hi);
  } else {
    slice_sums<VEC, false>(P, trow, drow, slices, chunk_lo, chunk_hi);
  }
}

// Kernel 1 (split path): grid = bs * num_splits blocks; chunk sums and walk results go to the
// workspace for pick_kernel.
template <int VEC, bool STAGED>
__global__ void __launch_bounds__(kWalkThreads, kWalkMinBlocks)
    walk_and_slice_kernel(Params P) {
  __shared__ WalkResult s_walk;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t b = static_cast<int64_t>(blockIdx.x) / P.num_splits;
  const int32_t split = static_cast<int32_t>(blockIdx.x % P.num_splits);
  walk_and_slice_block<VEC, STAGED, false>(P, b, split, smem_raw, s_walk, P.slices + b * P.num_chunks);
}

// ------------------------------------------------------------------------------------------
// Kernel 2: total, chunk search, in-chunk scan (FlashInfer), fallback, write the final token.
// ------------------------------------------------------------------------------------------
// One round of warp 0's prefix over the chunk sums: chunks [base, base + kRound), kPer
// consecutive chunks per lane.  pre[i] receives the running sum through the lane's i-th chunk:
//   pre[i] = (carry + excl_lane) + (s[0] + ... + s[i])   (lane-local sums left to right,
//   excl_lane = fixed shuffle scan of the lane totals),
// a fixed order, so two evaluations give the same bits.  Chunks past num_chunks count as 0.
// Returns the running sum through the round's last real chunk (the next round's carry).
constexpr int kPer = 8;
constexpr int kRound = 32 * kPer;

__device__ __forceinline__ float prefix_round(const SliceSum* __restrict__ slices, int num_chunks,
                                              int base, float carry, int lane, float (&pre)[kPer],
                                              int& last_valid) {
  SliceSum sl[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {  // all loads first (clamped index, masked below)
    const int k = base + lane * kPer + i;
    sl[i] = slices[k < num_chunks ? k : num_chunks - 1];
  }
  float loc[kPer];
  float run = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const bool real = base + lane * kPer + i < num_chunks;
    run = __fadd_rn(run, real ? sl[i].sum : 0.0f);
    loc[i] = run;
    if (real) last_valid = max(last_valid, sl[i].last_valid);
  }
  float incl = run;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl = __fadd_rn(y, incl);
  }
  float excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0f;
  const float lbase = __fadd_rn(carry, excl);
#pragma unroll
  for (int i = 0; i < kPer; ++i) pre[i] = __fadd_rn(lbase, loc[i]);
  // running sum through the last real chunk of this round
  const int last = min(num_chunks, base + kRound) - 1 - base;
  const int owner = last / kPer, slot = last % kPer;
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) mine = (i == slot) ? pre[i] : mine;
  return __shfl_sync(0xffffffffu, mine, owner);
}

// Kernel 2 body for request b: `w` is its walk result, `slices` its chunk sums (workspace in
// global memory, or shared memory in the fused kernel).
template <int VEC, bool DETERMINISTIC>
__device__ __forceinline__ void pick_block(const Params& P, int64_t b, const WalkResult w,
                                           const SliceSum* slices) {
  namespace fs = flashinfer::sampling;
  using TempStorage = fs::SamplingTempStorage<kPickThreads, fs::SCAN_ALGO, fs::REDUCE_ALGO>;
  __shared__ TempStorage temp;
  __shared__ float s_u, s_running;
  __shared__ int s_start, s_fallback;

  const int tid = threadIdx.x;
  const int32_t V = P.vocab;

  // Warp 0: total and chunk search over the chunk sums in a fixed order (repeatable).
  //   pass A: total = running sum through the last chunk (rounds of kRound chunks);
  //   pass B: the first chunk whose running sum (same evaluation as pass A) exceeds u; the
  //           last chunk's running sum is the total, so one is found whenever total > u.
  if (tid < 32) {
    const int lane = tid;
    const int nc = P.num_chunks;
    float pre[kPer];
    float total = 0.0f;
    int lv = -1;
    for (int base = 0; base < nc; base += kRound) total = prefix_round(slices, nc, base, total, lane, pre, lv);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) lv = max(lv, __shfl_xor_sync(0xffffffffu, lv, off));
    const float u = __fmul_rn(P.uniform_final[b], total);
    int start = -1;
    float before = 0.0f;
    if (total > u) {
      float carry = 0.0f;
      for (int base = 0; base < nc; base += kRound) {
        if (nc > kRound) {  // one round: pre[] still holds it
          int dummy = -1;
          const float next = prefix_round(slices, nc, base, carry, lane, pre, dummy);
          (void)next;
        }
        // running sum before each of this lane's chunks: the previous lane's last, or carry
        float prev = __shfl_up_sync(0xffffffffu, pre[kPer - 1], 1);
        if (lane == 0) prev = carry;
        int k_hit = kPer;
        float b_hit = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const bool real = base + lane * kPer + i < nc;
          if (k_hit == kPer && real && pre[i] > u) {
            k_hit = i;
            b_hit = prev;
          }
          prev = pre[i];
        }
        const unsigned hit = __ballot_sync(0xffffffffu, k_hit < kPer);
        if (hit != 0u) {
          const int src = __ffs(hit) - 1;
          start = base + src * kPer + __shfl_sync(0xffffffffu, k_hit, src);
          before = __shfl_sync(0xffffffffu, b_hit, src);
          break;
        }
        // next round's carry: the running sum through this round's last chunk (all real)
        carry = __shfl_sync(0xffffffffu, pre[kPer - 1], 31);
      }
    }
    if (lane == 0) {
      s_u = u;
      s_running = before;
      s_start = start;  // -1: total <= u, or rounding: nothing crossed
      int fb = lv;
      if (fb < 0) fb = static_cast<int>(w.last_rej);
      if (fb < 0) fb = V - 1;
      s_fallback = fb;
      temp.sampled_id = V;
    }
  }
  __syncthreads();

  int sampled = V;
  const int start = s_start;
  if (start >= 0) {
    const bool bonus = (w.n == P.num_spec - 1);
    const float* trow = P.target_probs + (b * P.num_nodes + w.row) * static_cast<int64_t>(V);
    const float* drow = P.draft_probs + (b * P.num_nodes + w.row) * static_cast<int64_t>(V);
    const float u = s_u;
    float aggregate = s_running;
    int last_valid_index = -1;
    constexpr int kStep = kPickThreads * VEC;  // entries per DeviceSamplingFromProb call
    const uint32_t num_steps = static_cast<uint32_t>((V + kStep - 1) / kStep);
    const uint32_t first_step = static_cast<uint32_t>(static_cast<int64_t>(start) * kChunk / kStep);
    for (uint32_t i = first_step; i < num_steps; ++i) {
      const int64_t j = static_cast<int64_t>(i) * kStep + static_cast<int64_t>(tid) * VEC;
      flashinfer::vec_t<float, VEC> pv;
      if (j < V) {
        FVec<VEC> r = residual_vec<VEC>(trow, drow, bonus, j);
#pragma unroll
        for (int k = 0; k < VEC; ++k) pv[k] = r.v[k];
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) pv[k] = 0.0f;
      }
      fs::DeviceSamplingFromProb<VEC, kPickThreads, fs::SCAN_ALGO, fs::REDUCE_ALGO, DETERMINISTIC>(
          i, static_cast<uint32_t>(V), [](float x) { return x > 0.0f; }, u, pv, aggregate,
          last_valid_index, &temp);
      if (aggregate > u) break;
    }
    sampled = temp.sampled_id;
  }
  if (tid == 0) {
    const int32_t tok = (sampled >= 0 && sampled < V) ? sampled : s_fallback;
    if (w.last >= 0 && w.last < P.predicts_len) P.predicts[w.last] = tok;
  }
}

// Kernel 2 (split path): grid = bs blocks; reads the walk result and chunk sums of kernel 1
// from the workspace (programmatic dependent launch where available).
template <int VEC, bool DETERMINISTIC>
__global__ void __launch_bounds__(kPickThreads) pick_kernel(Params P) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int64_t b = blockIdx.x;
  pick_block<VEC, DETERMINISTIC>(P, b, P.walk[b], P.slices + b * P.num_chunks);
}

// ------------------------------------------------------------------------------------------
// Fused kernel (one split per request): grid = bs blocks.  Walk, chunk sums (kept in shared
// memory after the staged tree, at byte offset P.fused_slices_offset) and the final pick in one
// launch, with no workspace.  Same code paths as the two kernels, so the same bits.
// ------------------------------------------------------------------------------------------
static_assert(kPickThreads == kWalkThreads, "the fused kernel runs both bodies with one block shape");

template <int VEC, bool STAGED, bool DETERMINISTIC>
__global__ void __launch_bounds__(kWalkThreads) fused_kernel(Params P) {
  __shared__ WalkResult s_walk;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t b = blockIdx.x;
  SliceSum* s_slices = reinterpret_cast<SliceSum*>(smem_raw + P.fused_slices_offset);
  walk_and_slice_block<VEC, STAGED, true>(P, b, 0, smem_raw, s_walk, s_slices);
  __syncthreads();
  const WalkResult w = s_walk;
  pick_block<VEC, DETERMINISTIC>(P, b, w, s_slices);
}

}  // namespace tree_sampling
}  // namespace kernelcache
