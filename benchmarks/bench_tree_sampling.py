"""Kernel-time benchmark of tree_speculative_sampling_target_only vs SGLang's AOT op.

Times CUDA-graph replays (no input copies, no Python/launch overhead): each graph holds
``--inner`` back-to-back calls on the same inputs, timed with CUDA events over ``--reps``
replays. The AOT op (sglang-kernel 0.4.6, ``.device/aot/common_ops.abi3.so``) is measured in the
same process on the same inputs when the file exists. Prints per-shape times, the ratio
AOT / ours, and at bs=256 the achieved bandwidth counted from the bytes the kernel must read.

    python benchmarks/bench_tree_sampling.py [--json out.json] [--sweep]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (bs, num_draft_tokens, spec_steps+1, vocab, topk, AOT time reported in the issue [us])
SHAPES = [
    (1, 4, 4, 32000, 1, 12.8),
    (8, 8, 5, 32000, 1, 16.0),
    (16, 16, 8, 32000, 4, 18.1),
    (8, 8, 5, 128256, 1, 56.4),
    (64, 8, 5, 128256, 1, 78.4),
    (8, 64, 6, 151936, 4, 58.9),
    (256, 8, 5, 128256, 1, 165.6),
]
HBM_PEAK_TBS = 4.8  # H200 HBM3e


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
    logits = torch.randn(bs, N, V, device=dev, generator=g)
    target = torch.softmax(logits, dim=-1)
    del logits
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


ORDER = ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
         "retrive_next_token", "retrive_next_sibling", "uniform_samples",
         "uniform_samples_for_final_sampling", "target_probs", "draft_probs")


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
    return times[len(times) // 2]  # median, us per call


def must_read_bytes(t, S, V):
    """Bytes the kernel has to read: the final row (target, plus draft unless bonus) per request,
    plus the tree metadata."""

    n = t["accept_token_num"]
    bonus = (n == S - 1).sum().item()
    bs, N = t["candidates"].shape
    rows = bs * V * 4 + (bs - bonus) * V * 4
    meta = bs * N * (8 * 4 + 4) + bs * 4
    return rows + meta, bonus


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", action="store_true", help="also sweep blocks-per-SM targets")
    args = ap.parse_args()

    import torch

    from kernelcache.kernels import speculative_sampling as ss

    aot = None
    aot_so = REPO / ".device" / "aot" / "common_ops.abi3.so"
    if aot_so.is_file():
        torch.ops.load_library(str(aot_so))
        aot = torch.ops.sgl_kernel.tree_speculative_sampling_target_only.default
    dev = torch.cuda.get_device_properties(0)
    print(f"device: {dev.name}, {dev.multi_processor_count} SMs; AOT op: {'yes' if aot else 'absent'}")
    rows = []
    hdr = f"{'bs':>4} {'N':>3} {'S':>2} {'V':>7} {'k':>2} | {'ours us':>8} {'AOT us':>8} {'AOT/ours':>8} | {'issue AOT':>9}"
    print(hdr)
    print("-" * len(hdr))
    for bs, N, S, V, topk, issue_aot in SHAPES:
        t = make_inputs(bs, N, S, V, topk)
        args_t = [t[k] for k in ORDER]
        ours = time_graph(lambda a=args_t: ss.tree_speculative_sampling_target_only(*a, 1.0, 1.0, True),
                          args.inner, args.reps)
        ours_nd = time_graph(lambda a=args_t: ss.tree_speculative_sampling_target_only(*a, 1.0, 1.0, False),
                             args.inner, args.reps)
        t_aot = None
        if aot is not None:
            t_aot = time_graph(lambda a=args_t: aot(*a, 1.0, 1.0, True), args.inner, args.reps)
        row = dict(bs=bs, N=N, S=S, V=V, topk=topk, ours_us=ours, ours_nondet_us=ours_nd,
                   aot_us=t_aot, issue_aot_us=issue_aot,
                   splits=ss.choose_num_splits(bs, V, dev.multi_processor_count))
        if bs == 256:
            # fresh outputs for the accounting
            t2 = make_inputs(bs, N, S, V, topk)
            ss.tree_speculative_sampling_target_only(*[t2[k] for k in ORDER], 1.0, 1.0, True)
            torch.cuda.synchronize()
            nbytes, bonus = must_read_bytes(t2, S, V)
            row["must_read_bytes"] = nbytes
            row["bonus_requests"] = bonus
            row["ours_TBs"] = nbytes / (ours * 1e-6) / 1e12
            row["ours_hbm_frac"] = row["ours_TBs"] / HBM_PEAK_TBS
            if t_aot:
                row["aot_TBs"] = nbytes / (t_aot * 1e-6) / 1e12
            del t2
        if args.sweep:
            sweep = {}
            for per_sm in (1, 2, 4, 8, 16, 32):
                old = ss._TARGET_BLOCKS_PER_SM
                ss._TARGET_BLOCKS_PER_SM = per_sm
                try:
                    sweep[per_sm] = time_graph(
                        lambda a=args_t: ss.tree_speculative_sampling_target_only(*a, 1.0, 1.0, True),
                        args.inner, args.reps)
                finally:
                    ss._TARGET_BLOCKS_PER_SM = old
            row["sweep_blocks_per_sm"] = sweep
        rows.append(row)
        ratio = f"{t_aot / ours:8.2f}" if t_aot else f"{'-':>8}"
        aot_s = f"{t_aot:8.1f}" if t_aot else f"{'-':>8}"
        print(f"{bs:>4} {N:>3} {S:>2} {V:>7} {topk:>2} | {ours:8.1f} {aot_s} {ratio} | {issue_aot:9.1f}"
              + (f"   (non-det {ours_nd:.1f})"))
        if bs == 256:
            print(f"      bs=256: must-read {row['must_read_bytes'] / 1e6:.1f} MB ({row['bonus_requests']} bonus rows), "
                  f"ours {row['ours_TBs']:.2f} TB/s = {100 * row['ours_hbm_frac']:.0f}% of {HBM_PEAK_TBS} TB/s"
                  + (f"; AOT {row['aot_TBs']:.2f} TB/s" if t_aot else ""))
        if args.sweep:
            print("      blocks/SM sweep (us): " + ", ".join(f"{k}:{v:.1f}" for k, v in row["sweep_blocks_per_sm"].items()))
        del t, args_t
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
