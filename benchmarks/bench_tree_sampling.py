"""tree_speculative_sampling_target_only vs SGLang's AOT op, in both modes a server sees.

* eager: what a serving engine's verify step pays, calling the op from Python outside any
  graph: wall time per call of ``--calls`` back-to-back calls on the same inputs, one
  synchronize at the end (median of ``--reps``); and the CPU issue time per call (a loop of
  ``--issue-calls`` calls right after a synchronize, the launch queue never fills, so the loop
  time is the host cost alone).
* graph: kernel time, CUDA-graph replays of ``--inner`` back-to-back calls timed with CUDA
  events (median of ``--reps``).

The AOT op (sglang-kernel 0.4.6, ``.device/aot/common_ops.abi3.so``) is measured in the same
process on the same inputs. Besides the public function, the benchmark times the pieces of a
call (the levers of the issue): the Python validation alone; the raw tvm-ffi call the public
function makes; the torch custom op (dispatcher) path; the explicit entry point with a cached
workspace; one fused launch (one split) instead of two; the previous public path rebuilt here
(Python validation + custom op + workspace/split choice in Python, as before this change); and,
in a subprocess with ``TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API=1``, tvm-ffi's fallback tensor
conversion instead of torch's DLPack C exchange API.

    python benchmarks/bench_tree_sampling.py [--json out.json] [--plot-dir DIR] [--sweep]
    python benchmarks/bench_tree_sampling.py --plot-from out.json --plot-dir benchmarks
"""
# NOTE: no ``from __future__ import annotations``: torch.library infers the schema of the
# benchmark's custom op from real annotations.
import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (bs, num_draft_tokens, spec_steps+1, vocab, topk); the issue's six shapes and one wide tree
SHAPES = [
    (1, 4, 4, 32000, 1),
    (8, 8, 5, 32000, 1),
    (16, 16, 8, 32000, 4),
    (8, 8, 5, 128256, 1),
    (64, 8, 5, 128256, 1),
    (8, 64, 6, 151936, 4),
    (256, 8, 5, 128256, 1),
]
# the issue's table (H200, before this change): public API eager / AOT eager / ours graph, us
ISSUE = {
    (1, 4, 4, 32000, 1): (85, 13, 6.1),
    (8, 8, 5, 32000, 1): (72, 17, 6.6),
    (16, 16, 8, 32000, 4): (68, 18, 7.3),
    (8, 8, 5, 128256, 1): (67, 56, 7.3),
    (64, 8, 5, 128256, 1): (67, 79, 22.9),
    (256, 8, 5, 128256, 1): (73, 168, 68.2),
}
_peak: tuple[float, str] | None = None


def card_peak_tbs() -> tuple[float, str]:
    """This card's memory bandwidth peak (TB/s) and where the figure came from.

    NVML's maximum memory clock and bus width (double data rate: 2 transfers a clock): 3.35 TB/s
    on an H100 SXM, 4.8-4.9 on an H200. Without NVML, a measured device-to-device copy (a floor
    of the peak, said so in the printout)."""
    global _peak
    if _peak is not None:
        return _peak
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        bits = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        _peak = (2 * mhz * 1e6 * bits / 8 / 1e12, f"NVML: {mhz} MHz x {bits}-bit bus")
    except Exception:  # noqa: BLE001 - no NVML: measure
        import torch

        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        y = torch.empty_like(x)
        y.copy_(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            y.copy_(x)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        _peak = (10 * 2 * x.numel() / seconds / 1e12, "measured device copy (a floor of the peak)")
        del x, y
    return _peak
ORDER = ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
         "retrive_next_token", "retrive_next_sibling", "uniform_samples",
         "uniform_samples_for_final_sampling", "target_probs", "draft_probs")


def make_inputs(bs, N, S, V, topk, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    # k-ary BFS tree (topk=1: chain), retrive_index = b*N + i
    nxt = [-1] * N
    sib = [-1] * N
    children = [[] for _ in range(N)]
    for c in range(1, N):
        children[(c - 1) // topk].append(c)
    for x in range(N):
        if children[x]:
            nxt[x] = children[x][0]
            for a, c in zip(children[x], children[x][1:]):
                sib[a] = c
    dev = "cuda"
    if bs * N * V:
        target = torch.softmax(torch.randn(bs, N, V, device=dev, generator=g), dim=-1)
    else:
        target = torch.zeros(bs, N, V, device=dev)
    return dict(
        predicts=torch.full((bs * N,), -1, dtype=torch.int32, device=dev),
        accept_index=torch.full((bs, S), -1, dtype=torch.int32, device=dev),
        accept_token_num=torch.zeros(bs, dtype=torch.int32, device=dev),
        candidates=torch.randint(0, V, (bs, N), device=dev, generator=g),
        retrive_index=torch.arange(bs * N, device=dev).view(bs, N),
        retrive_next_token=torch.tensor(nxt, device=dev).expand(bs, N).contiguous(),
        retrive_next_sibling=torch.tensor(sib, device=dev).expand(bs, N).contiguous(),
        uniform_samples=torch.rand(bs, N, device=dev, generator=g),
        uniform_samples_for_final_sampling=torch.rand(bs, device=dev, generator=g),
        target_probs=target,
        draft_probs=torch.zeros(bs, N, V, device=dev),
    )


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
def time_graph(fn, inner=20, reps=20):
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / inner)
    times.sort()
    del g
    return times[len(times) // 2]  # median, us per call


def time_eager(fn, calls=500, reps=7):
    """Wall time per call of `calls` back-to-back calls + one synchronize (median of reps), us."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    out = []
    gc.disable()
    try:
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter_ns() - t0) / calls / 1e3)
    finally:
        gc.enable()
    out.sort()
    return out[len(out) // 2]


def time_issue(fn, calls=100, reps=15, sync=True):
    """Host time per call of a loop of `calls` calls started on an idle GPU (median), us."""
    import torch

    for _ in range(20):
        fn()
    if sync:
        torch.cuda.synchronize()
    out = []
    gc.disable()
    try:
        for _ in range(reps):
            if sync:
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter_ns() - t0) / calls / 1e3)
    finally:
        gc.enable()
    if sync:
        torch.cuda.synchronize()
    out.sort()
    return out[len(out) // 2]


def time_backlog(fn, calls=200, reps=7):
    """GPU time per call of eagerly launched calls: the GPU is held busy (torch.cuda._sleep)
    while `calls` calls are queued, then works through the queue at its own pace; CUDA events
    around the queued part (median of reps), us. Shows whether eager is bound by the GPU."""
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e6))  # ~1 ms of spinning, longer than queueing the calls
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0 / calls)
    out.sort()
    return out[len(out) // 2]


def set_options(pdl=-1, eager_fused_chunks=-1):
    from kernelcache.kernels.speculative_sampling import OPTIONS_FN_NAME
    from kernelcache.kernels.speculative_sampling import call as op

    return list(op.function(OPTIONS_FN_NAME)(pdl, eager_fused_chunks))


def levers(a, aot):
    """PDL on/off for the two-kernel path, and eager one-launch vs two-launch over (bs, V)."""
    import torch

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    raw = op.function(op.FN_NAME)
    out = {"pdl": [], "fusion": []}
    for bs, V in ((1, 32000), (8, 32000), (8, 128256), (64, 128256)):
        t = make_inputs(bs, 8, 5, V, 1)
        args_t = [t[k] for k in ORDER]
        sp = ss.choose_num_splits(bs, V, sms)
        ws = torch.empty(op.workspace_numel(bs, V), dtype=torch.int64, device="cuda")
        row = dict(bs=bs, V=V, splits=sp)
        for pdl in (1, 0):
            set_options(pdl=pdl)
            fn = (lambda: raw(*args_t, 1.0, 1.0, True, ws, sp))
            row[f"pdl{pdl}"] = dict(eager=time_eager(fn, a.calls, a.reps), backlog=time_backlog(fn),
                                    issue=time_issue(fn, a.issue_calls), graph=time_graph(fn, a.inner, a.reps))
        set_options(pdl=1)
        fn = (lambda: raw(*args_t, 1.0, 1.0, True, ws, 1))
        row["fused"] = dict(eager=time_eager(fn, a.calls, a.reps), backlog=time_backlog(fn),
                            issue=time_issue(fn, a.issue_calls), graph=time_graph(fn, a.inner, a.reps))
        if aot is not None:
            fa = (lambda: aot(*args_t, 1.0, 1.0, True))
            row["aot"] = dict(eager=time_eager(fa, a.calls, a.reps), backlog=time_backlog(fa))
        out["pdl"].append(row)
        print("lever", json.dumps(row), flush=True)

    for V in (16000, 32000, 48000, 64000, 96000, 128256, 151936):
        for bs in (1, 8, 32, 64):
            t = make_inputs(bs, 8, 5, V, 1)
            args_t = [t[k] for k in ORDER]
            sp = ss.choose_num_splits(bs, V, sms)
            ws = torch.empty(op.workspace_numel(bs, V), dtype=torch.int64, device="cuda")
            split_fn = (lambda: raw(*args_t, 1.0, 1.0, True, ws, sp))
            fused_fn = (lambda: raw(*args_t, 1.0, 1.0, True, ws, 1))
            row = dict(bs=bs, V=V, splits=sp, split_eager=time_eager(split_fn, a.calls // 2, 5),
                       fused_eager=time_eager(fused_fn, a.calls // 2, 5))
            out["fusion"].append(row)
            print("fusion", json.dumps(row), flush=True)

    torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------------------------------------
# the previous public path, rebuilt for a same-run comparison
# ---------------------------------------------------------------------------------------------
_legacy_op = None


def legacy_path():
    """Python validation, then a torch custom op whose body chooses the split count and
    allocates the workspace in Python and calls the explicit entry point: what the public
    function did before the fast path (registered here under another name)."""
    global _legacy_op
    import torch

    from kernelcache.kernels.speculative_sampling import call as op

    if _legacy_op is None:
        @torch.library.custom_op("kcbench::legacy_tree_sampling",
                                 mutates_args=("predicts", "accept_index", "accept_token_num", "draft_probs"))
        def _legacy(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                    candidates: torch.Tensor, retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                    retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                    uniform_samples_for_final_sampling: torch.Tensor, target_probs: torch.Tensor,
                    draft_probs: torch.Tensor, threshold_single: float, threshold_acc: float,
                    deterministic: bool) -> None:
            bs, V = candidates.shape[0], target_probs.shape[2]
            if bs == 0:
                return
            splits = op.choose_num_splits(bs, V, op.num_sms(target_probs.device))
            ws = torch.empty(op.workspace_numel(bs, V), dtype=torch.int64, device=target_probs.device)
            op.module()[op.FN_NAME](  # a function lookup per call, as before
                predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                draft_probs, float(threshold_single), float(threshold_acc), bool(deterministic), ws, splits)

        _legacy_op = torch.ops.kcbench.legacy_tree_sampling.default

    def call(*a):
        op.validate(*a)
        _legacy_op(*a[:11], float(a[11]), float(a[12]), bool(a[13]))

    return call


# ---------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------
def variants(args_t, aot, splits):
    import torch

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    bs, V = args_t[3].shape[0], args_t[9].shape[2]
    ws = torch.empty(max(op.workspace_numel(bs, V), 1), dtype=torch.int64, device="cuda")
    auto = op.function(op.AUTO_FN_NAME)
    explicit = op.function(op.FN_NAME)
    custom = op.register_op()
    legacy = legacy_path()
    a = tuple(args_t)
    v = {
        "public": lambda: ss.tree_speculative_sampling_target_only(*a, 1.0, 1.0, True),
        "raw_auto": lambda: auto(*a, 1.0, 1.0, True),
        "raw_cached_ws": lambda: explicit(*a, 1.0, 1.0, True, ws, splits),
        "raw_fused": lambda: explicit(*a, 1.0, 1.0, True, ws, 1),
        "custom_op": lambda: custom(*a, 1.0, 1.0, True),
        "before": lambda: legacy(*a, 1.0, 1.0, True),
        "validate_only": lambda: op.validate(*a, 1.0, 1.0, True),
    }
    if aot is not None:
        v["aot"] = lambda: aot(*a, 1.0, 1.0, True)
    return v


def must_read_bytes(t, S, V):
    """Bytes the kernel has to read: the final row (target, plus draft unless bonus) per request,
    plus the tree metadata."""
    n = t["accept_token_num"]
    bonus = (n == S - 1).sum().item()
    bs, N = t["candidates"].shape
    rows = bs * V * 4 + (bs - bonus) * V * 4
    meta = bs * N * (8 * 4 + 4) + bs * 4
    return rows + meta, bonus


def measure_shape(shape, aot, a):
    import torch

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    bs, N, S, V, topk = shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = ss.choose_num_splits(bs, V, sms)
    eager_splits = ss.choose_num_splits(bs, V, sms, eager=True)
    t = make_inputs(bs, N, S, V, topk)
    args_t = [t[k] for k in ORDER]
    v = variants(args_t, aot, splits)
    row = dict(bs=bs, N=N, S=S, V=V, topk=topk, splits=splits, fused=splits == 1, eager_splits=eager_splits)
    # graph replay (kernel time)
    row["graph_us"] = {k: time_graph(v[k], a.inner, a.reps) for k in ("public", "raw_fused") + (("aot",) if aot else ())}
    row["graph_us"]["public_nondet"] = time_graph(
        lambda: ss.tree_speculative_sampling_target_only(*args_t, 1.0, 1.0, False), a.inner, a.reps)
    # eager wall per call
    row["eager_us"] = {k: time_eager(fn, a.calls, a.reps) for k, fn in v.items() if k != "validate_only"}
    # GPU time per eagerly launched call (queue pre-filled behind a busy GPU)
    row["backlog_us"] = {k: time_backlog(v[k]) for k in ("public", "raw_fused", "raw_cached_ws") + (("aot",) if aot else ())}
    # host issue time per call
    row["issue_us"] = {k: time_issue(fn, a.issue_calls) for k, fn in v.items()}
    # the same calls on a batch of 0 requests (same 11 tensors, nothing launched): conversion +
    # C++ validation for the raw call, plus the Python layers for the others
    z = make_inputs(0, N, S, V, topk)
    vz = variants([z[k] for k in ORDER], aot, splits)
    row["issue_bs0_us"] = {k: time_issue(vz[k], a.issue_calls) for k in ("public", "raw_auto", "custom_op", "before")}
    ss.tree_speculative_sampling_target_only(*args_t, 1.0, 1.0, True)
    torch.cuda.synchronize()
    # breakdown of the public call (us of host time; the kernel is the graph figure)
    iu, iz = row["issue_us"], row["issue_bs0_us"]
    row["breakdown_us"] = dict(
        python_layer=iz["public"] - iz["raw_auto"],
        tvm_ffi_convert_and_cpp_validate=iz["raw_auto"],
        launch_incl_workspace=iu["raw_auto"] - iz["raw_auto"],
        kernel=row["graph_us"]["public"],
        custom_op_dispatch=iu["custom_op"] - iu["raw_auto"],
        before_total=iu["before"],
        before_validation=iu["validate_only"],
        before_dispatch_and_py_launch=iu["before"] - iu["validate_only"] - iu["raw_cached_ws"],
    )
    if bs == 256:
        t2 = make_inputs(bs, N, S, V, topk)
        ss.tree_speculative_sampling_target_only(*[t2[k] for k in ORDER], 1.0, 1.0, True)
        torch.cuda.synchronize()
        nbytes, bonus = must_read_bytes(t2, S, V)
        row["must_read_bytes"] = nbytes
        row["ours_TBs"] = nbytes / (row["graph_us"]["public"] * 1e-6) / 1e12
        row["ours_hbm_frac"] = row["ours_TBs"] / card_peak_tbs()[0]
        del t2
    if a.sweep:
        raw = op.function(op.FN_NAME)
        ws = torch.empty(op.workspace_numel(bs, V), dtype=torch.int64, device="cuda")
        row["sweep_blocks_per_sm"] = {}
        for per_sm in (1, 2, 4, 8):
            sp = ss.choose_num_splits(bs, V, sms, per_sm)
            row["sweep_blocks_per_sm"][per_sm] = time_graph(
                lambda sp=sp: raw(*args_t, 1.0, 1.0, True, ws, sp), a.inner, a.reps)
    del t, z, v, vz
    torch.cuda.empty_cache()
    return row


def fallback_lever(a):
    """Run in a child with TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API=1: tvm-ffi converts each torch
    tensor through torch.utils.dlpack instead of torch's C exchange API."""
    env = dict(os.environ, TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API="1")
    cmd = [sys.executable, __file__, "--child-fallback", "--issue-calls", str(a.issue_calls)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def child_fallback(a):
    import torch

    from kernelcache.kernels import speculative_sampling as ss
    from kernelcache.kernels.speculative_sampling import call as op

    out = {}
    for shape in (SHAPES[0], SHAPES[3]):
        bs, N, S, V, topk = shape
        t = make_inputs(bs, N, S, V, topk)
        args_t = [t[k] for k in ORDER]
        splits = ss.choose_num_splits(bs, V, torch.cuda.get_device_properties(0).multi_processor_count)
        ws = torch.empty(op.workspace_numel(bs, V), dtype=torch.int64, device="cuda")
        raw = op.function(op.FN_NAME)
        z = make_inputs(0, N, S, V, topk)
        zargs = [z[k] for k in ORDER]
        out[str(shape)] = dict(
            env_allocator=op.env_allocator_available(),
            raw_cached_ws_issue_us=time_issue(lambda: raw(*args_t, 1.0, 1.0, True, ws, splits), a.issue_calls),
            raw_bs0_issue_us=time_issue(lambda: raw(*zargs, 1.0, 1.0, True, ws, 1), a.issue_calls),
            public_issue_us=time_issue(lambda: ss.tree_speculative_sampling_target_only(*args_t, 1.0, 1.0, True),
                                       a.issue_calls),
            public_eager_us=time_eager(lambda: ss.tree_speculative_sampling_target_only(*args_t, 1.0, 1.0, True),
                                       a.calls, a.reps),
        )
    print(json.dumps(out))


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def label(r):
    return f"{r['bs']},{r['N']},{r['S']},{r['V']}" + (f",k{r['topk']}" if r["topk"] > 1 else "")


def print_tables(res):
    rows = res["rows"]
    has_aot = any("aot" in r["eager_us"] for r in rows)
    print("\n== eager (per-call wall time, back-to-back) and graph replay (kernel time), us ==")
    hdr = (f"{'shape':>22} | {'ours':>6} {'AOT':>6} {'AOT/ours':>8} {'before':>7} | "
           f"{'graph ours':>10} {'AOT':>6} {'AOT/ours':>8} | splits")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        e, g = r["eager_us"], r["graph_us"]
        ea = e.get("aot")
        ga = g.get("aot")
        print(f"{label(r):>22} | {e['public']:6.1f} {ea or 0:6.1f} {(ea or 0) / e['public']:8.2f} {e['before']:7.1f} | "
              f"{g['public']:10.1f} {ga or 0:6.1f} {(ga or 0) / g['public']:8.2f} | {r['splits']}"
              + (" (fused)" if r["fused"] else ""))
    print("\n== host time per call (issue loop on an idle GPU), us ==")
    keys = ["public", "raw_auto", "raw_cached_ws", "raw_fused", "custom_op", "before", "validate_only"] + (
        ["aot"] if has_aot else [])
    print(f"{'shape':>22} | " + " ".join(f"{k:>13}" for k in keys))
    for r in rows:
        print(f"{label(r):>22} | " + " ".join(f"{r['issue_us'][k]:13.2f}" for k in keys))
    print("\n== breakdown of the public call (host us; kernel = graph replay) ==")
    bk = list(rows[0]["breakdown_us"])
    print(f"{'shape':>22} | " + " ".join(f"{k[-16:]:>16}" for k in bk))
    for r in rows:
        print(f"{label(r):>22} | " + " ".join(f"{r['breakdown_us'][k]:16.2f}" for k in bk))
    print("\n== one launch (fused, 1 split) vs the chosen split count: graph / eager us ==")
    for r in rows:
        print(f"{label(r):>22} | graph {r['graph_us']['public']:6.1f} vs fused {r['graph_us']['raw_fused']:6.1f} | "
              f"eager {r['eager_us']['raw_auto']:6.1f} vs fused {r['eager_us']['raw_fused']:6.1f}")
    if "fallback" in res:
        print("\n== tvm-ffi tensor conversion: DLPack C exchange API vs fallback (TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API=1) ==")
        print(json.dumps(res["fallback"], indent=1))
    for r in rows:
        if "ours_TBs" in r:
            print(f"bs=256: must-read {r['must_read_bytes'] / 1e6:.1f} MB, {r['ours_TBs']:.2f} TB/s = "
                  f"{100 * r['ours_hbm_frac']:.0f}% of {card_peak_tbs()[0]:.2f} TB/s ({card_peak_tbs()[1]})")
        if "sweep_blocks_per_sm" in r:
            print(f"{label(r):>22} blocks/SM sweep (graph us): "
                  + ", ".join(f"{k}:{v:.1f}" for k, v in r["sweep_blocks_per_sm"].items()))


def plot(res, out_dir: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    labels = [label(r).replace(",k", "\nk").replace(",", ",\n", 1) for r in rows]
    x = list(range(len(rows)))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, mode, title in ((axes[0], "eager_us", "eager (per-call wall time, back-to-back)"),
                            (axes[1], "graph_us", "CUDA-graph replay (kernel time)")):
        series = [("ours", [r[mode]["public"] for r in rows], "o-", "tab:blue")]
        if all("aot" in r[mode] for r in rows):
            series.append(("AOT op (sglang-kernel 0.4.6)", [r[mode]["aot"] for r in rows], "s--", "tab:red"))
        if mode == "eager_us":
            series.append(("ours before (validation + custom op)", [r[mode]["before"] for r in rows], "^:", "tab:gray"))
        for name, ys, style, color in series:
            ax.plot(x, ys, style, label=name, color=color)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("shape (bs, N, S, V[, topk])", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("time per call (us, log scale)")
    fig.suptitle(f"tree_speculative_sampling_target_only on {res.get('device', 'GPU')}", fontsize=11)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        p = out_dir / f"tree_sampling_eager_graph.{ext}"
        fig.savefig(p, dpi=110)
        print(f"wrote {p}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot-dir", default=None)
    ap.add_argument("--plot-from", default=None, help="only plot (and print) a saved --json result")
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--issue-calls", type=int, default=100)
    ap.add_argument("--sweep", action="store_true", help="also sweep blocks-per-SM targets")
    ap.add_argument("--no-fallback", action="store_true")
    ap.add_argument("--levers", action="store_true", help="PDL on/off and eager one- vs two-launch sweeps")
    ap.add_argument("--child-fallback", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plot_from:
        res = json.loads(Path(a.plot_from).read_text())
        print_tables(res)
        plot(res, Path(a.plot_dir or Path(a.plot_from).parent))
        return
    if a.child_fallback:
        child_fallback(a)
        return

    import torch

    native = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")  # before tvm_ffi is imported
    from kernelcache.kernels.speculative_sampling import call as op

    op.function(op.AUTO_FN_NAME)  # build / load
    import tvm_ffi

    aot = None
    aot_so = REPO / ".device" / "aot" / "common_ops.abi3.so"
    if aot_so.is_file():
        torch.ops.load_library(str(aot_so))
        aot = torch.ops.sgl_kernel.tree_speculative_sampling_target_only.default
    dev = torch.cuda.get_device_properties(0)
    res = dict(device=dev.name, sms=dev.multi_processor_count, torch=torch.__version__,
               tvm_ffi=tvm_ffi.__version__, torch_native_dlpack_c_api=native,
               env_allocator=op.env_allocator_available(), aot=aot is not None, rows=[])
    print(f"device: {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__} (native DLPack C "
          f"exchange API: {native}); tvm-ffi {tvm_ffi.__version__}; env allocator: {res['env_allocator']}; "
          f"AOT op: {'yes' if aot else 'absent'}")
    for shape in SHAPES:
        row = measure_shape(shape, aot, a)
        res["rows"].append(row)
        e = row["eager_us"]
        print(f"{label(row):>22}: eager ours {e['public']:.1f} AOT {e.get('aot', float('nan')):.1f} "
              f"before {e['before']:.1f}; graph ours {row['graph_us']['public']:.1f} "
              f"AOT {row['graph_us'].get('aot', float('nan')):.1f}", flush=True)
    if not a.no_fallback:
        res["fallback"] = fallback_lever(a)
    if a.levers:
        res["levers"] = levers(a, aot)
    print_tables(res)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    if a.plot_dir:
        try:
            plot(res, Path(a.plot_dir))
        except ImportError as e:
            print(f"no plot: {e}")


if __name__ == "__main__":
    main()
