"""Benchmark: kernelcache's NgramCorpus vs SGLang 0.5.23's NgramCorpus, side by side.

Server-default shapes (max_trie_depth 18, draft_token_num 12, max_bfs_breadth 10, capacity 1e7),
batch sizes 1, 8, 64, BFS and PROB:

* ``batch_get`` latency per call: every request follows its own document (with some random
  deviations), one token per step, tails = last 18 tokens, same request ids across steps
  (the serving worker's incremental pattern);
* ``batch_put`` throughput: one 18-token window per request per call followed by
  ``synchronize()`` (what the worker does after each verify), in windows per second.

SGLang is installed at benchmark time with ``pip install --no-deps sglang==0.5.23`` into a temp
directory (never vendored); its NgramCorpus JIT-compiles its own C++ with tvm-ffi. Its heavy
package ``__init__`` is bypassed (stub parent packages + a small ``load_jit``). When it cannot be
installed or built the peer is skipped with the reason printed.

    KERNELCACHE_DIR=/tmp/kc-bench .venv/bin/python benchmarks/bench_ngram.py [--out table.md]  (figures: benchmarks/RESULTS.md)
    KERNELCACHE_DIR=/tmp/kc-bench .venv/bin/python benchmarks/bench_ngram.py --overhead   (per-call audit)
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPE = dict(max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12, capacity=10_000_000)
BATCH_SIZES = (1, 8, 64)
SGLANG_VERSION = "0.5.23"


# -- the SGLang peer ----------------------------------------------------------------------------
def load_sglang(target: Path) -> tuple[type | None, str]:
    """Install sglang (no deps) into target and import its NgramCorpus; (cls, reason-if-None)."""
    try:
        if not (target / "sglang").is_dir():
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
                                str(target), f"sglang=={SGLANG_VERSION}"], capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                return None, f"pip install sglang=={SGLANG_VERSION} failed: {r.stderr.strip()[-300:]}"
        root = target / "sglang"
        for name, sub in [("sglang", ""), ("sglang.srt", "srt"), ("sglang.srt.speculative", "srt/speculative"),
                          ("sglang.srt.speculative.cpp_ngram", "srt/speculative/cpp_ngram"),
                          ("sglang.kernels", "kernels"), ("sglang.kernels.ops", "kernels/ops"),
                          ("sglang.kernels.ops.speculative", "kernels/ops/speculative"),
                          ("sglang.kernels.jit", "kernels/jit")]:
            m = types.ModuleType(name)
            m.__path__ = [str(root / sub)]
            sys.modules[name] = m
        utils = types.ModuleType("sglang.kernels.jit.utils")
        utils.cache_once = functools.cache

        def load_jit(name, cpp_files=(), header_only=False, **_kw):
            import tvm_ffi
            import tvm_ffi.cpp

            csrc = root / "kernels/jit/csrc"
            so = tvm_ffi.cpp.build(name="sgl_" + name, cpp_files=[str(csrc / f) for f in cpp_files],
                                   extra_cflags=["-std=c++20", "-O3"],
                                   extra_include_paths=[str(root / "kernels/jit/include"), str(csrc)],
                                   build_directory=str(target / "_build"))
            return tvm_ffi.load_module(so)

        utils.load_jit = load_jit
        sys.modules["sglang.kernels.jit.utils"] = utils
        mod = importlib.import_module("sglang.srt.speculative.cpp_ngram.ngram_corpus")
        cls = mod.NgramCorpus
        cls(**SHAPE, match_type="BFS")  # triggers the JIT build
        return cls, ""
    except Exception as e:  # noqa: BLE001 - any failure skips the peer
        return None, f"{type(e).__name__}: {e}"


# -- workload -----------------------------------------------------------------------------------
def make_docs(n_docs: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    # Zipf-like token distribution with shared phrases so that n-grams recur across documents
    phrases = [list(rng.zipf(1.3, size=rng.integers(3, 12)) % vocab) for _ in range(2000)]
    docs = []
    for _ in range(n_docs):
        doc: list[int] = []
        while len(doc) < length:
            if rng.random() < 0.7:
                doc += phrases[int(rng.integers(0, len(phrases)))]
            else:
                doc.append(int(rng.integers(0, vocab)))
        docs.append([int(t) for t in doc[:length]])
    return docs


def prefill(corpus, docs: list[list[int]], D: int) -> None:
    # the worker inserts sliding windows of D tokens; insert every D-th window of each document
    windows = [doc[i: i + D] for doc in docs for i in range(0, len(doc) - D, 4)]
    for i in range(0, len(windows), 4096):
        corpus.batch_put(windows[i: i + 4096])
    corpus.synchronize()


def request_streams(docs, bs: int, steps: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    streams = []
    for _ in range(bs):
        doc = docs[rng.randrange(len(docs))]
        start = rng.randrange(0, len(doc) - steps - 40)
        s = list(doc[start: start + 20 + steps])
        for i in range(20, len(s)):
            if rng.random() < 0.15:
                s[i] = rng.randrange(32000)
        streams.append(s)
    return streams


def bench_get(corpus, streams, steps: int, D: int, tag: str) -> float:
    bs = len(streams)
    rids = [f"{tag}-{i}" for i in range(bs)]
    # warm-up (also creates the states)
    corpus.batch_get(rids, [s[:20][-D:] for s in streams], [20] * bs)
    times = []
    for step in range(steps):
        n = 21 + step
        tails = [s[:n][-D:] for s in streams]
        lens = [n] * bs
        t0 = time.perf_counter()
        corpus.batch_get(rids, tails, lens)
        times.append(time.perf_counter() - t0)
    corpus.erase_match_state(rids)
    return float(np.median(times))


def bench_put(corpus, streams, steps: int, D: int) -> float:
    bs = len(streams)
    t0 = time.perf_counter()
    for step in range(steps):
        n = 21 + step
        corpus.batch_put([s[:n][-D:] for s in streams])
        corpus.synchronize()
    return bs * steps / (time.perf_counter() - t0)


def _per_call_us(fn, calls: int = 2000, reps: int = 7) -> float:
    for _ in range(50):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t0) / calls / 1e3)
    out.sort()
    return out[len(out) // 2]


def overhead_audit(docs, D: int, steps: int) -> list[str]:
    """Per-call cost of the Python layer of batch_get / batch_put vs the native calls it makes
    (same corpus, same tails; the native call gets the arrays the Python layer builds)."""
    from kernelcache.kernels import NgramCorpus
    from kernelcache.kernels.ngram_corpus import checks as nc

    lines = ["| call | bs | public (us) | native call alone (us) | Python layer (us) | of which token lists -> CSR (us) |",
             "|---|---|---|---|---|---|"]
    for match_type in ("BFS",):
        corpus = NgramCorpus(**SHAPE, match_type=match_type)
        prefill(corpus, docs, D)
        for bs in (1, 8):
            streams = request_streams(docs, bs, steps, seed=bs)
            rids = [f"ov{bs}-{i}" for i in range(bs)]
            tails = [s[:40][-D:] for s in streams]
            lens = [40] * bs
            corpus.batch_get(rids, tails, lens)  # creates the states
            d = corpus.draft_token_num
            flat, offsets, _ = nc.to_csr(tails)
            tl = np.asarray(lens, dtype=np.int64)
            sids = np.asarray([corpus._req_to_state[r] for r in rids], dtype=np.int64)
            ids = np.empty(bs * d, dtype=np.int64)
            mask = np.empty(bs * d * d, dtype=np.int64)
            obj = corpus._obj
            pub = _per_call_us(lambda: corpus.batch_get(rids, tails, lens))
            raw = _per_call_us(lambda: obj.batch_match(sids, flat, offsets, tl, ids, mask))
            csr = _per_call_us(lambda: nc.to_csr(tails))
            lines.append(f"| batch_get ({match_type}) | {bs} | {pub:.2f} | {raw:.2f} | {pub - raw:.2f} | {csr:.2f} |")
            win = [s[:40][-D:] for s in streams]
            wflat, woff, _ = nc.to_csr(win)
            pub = _per_call_us(lambda: corpus.batch_put(win), calls=500)
            corpus.synchronize()
            raw = _per_call_us(lambda: obj.async_insert(wflat, woff), calls=500)
            corpus.synchronize()
            csr = _per_call_us(lambda: nc.to_csr(win))
            lines.append(f"| batch_put (queue only) | {bs} | {pub:.2f} | {raw:.2f} | {pub - raw:.2f} | {csr:.2f} |")
            sync = _per_call_us(lambda: (corpus.batch_put(win), corpus.synchronize()), calls=300)
            rsync = _per_call_us(lambda: (obj.async_insert(wflat, woff), obj.synchronize()), calls=300)
            lines.append(f"| batch_put + synchronize | {bs} | {sync:.2f} | {rsync:.2f} | {sync - rsync:.2f} | {csr:.2f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--doc-len", type=int, default=2000)
    ap.add_argument("--sglang-target", default=str(Path(tempfile.gettempdir()) / "kc-bench-sglang-0.5.23"))
    ap.add_argument("--no-sglang", action="store_true")
    ap.add_argument("--overhead", action="store_true",
                    help="only the per-call audit: Python layer vs the native calls, bs 1 and 8")
    args = ap.parse_args()
    if args.overhead:
        docs = make_docs(args.docs, args.doc_len, 32000, seed=0)
        lines = overhead_audit(docs, SHAPE["max_trie_depth"], args.steps)
        print("\n".join(lines))
        if args.out:
            Path(args.out).write_text("\n".join(lines) + "\n")
        return

    from kernelcache.kernels import NgramCorpus

    D = SHAPE["max_trie_depth"]
    docs = make_docs(args.docs, args.doc_len, 32000, seed=0)
    peers: dict[str, type] = {"kernelcache": NgramCorpus}
    skipped = ""
    if args.no_sglang:
        skipped = "--no-sglang given"
    else:
        t0 = time.perf_counter()
        cls, skipped = load_sglang(Path(args.sglang_target))
        if cls is not None:
            peers[f"sglang {SGLANG_VERSION}"] = cls
            print(f"sglang {SGLANG_VERSION} NgramCorpus ready in {time.perf_counter() - t0:.1f}s")
        else:
            print(f"SKIP sglang peer: {skipped}")

    results: dict[tuple[str, str, int], dict[str, float]] = {}
    for match_type in ("BFS", "PROB"):
        for name, cls in peers.items():
            corpus = cls(**SHAPE, match_type=match_type)
            t0 = time.perf_counter()
            prefill(corpus, docs, D)
            pre = time.perf_counter() - t0
            print(f"[{match_type}] {name}: prefill {pre:.2f}s")
            for bs in BATCH_SIZES:
                streams = request_streams(docs, bs, args.steps, seed=bs)
                get_s = bench_get(corpus, streams, args.steps, D, tag=f"{match_type}{bs}")
                put_w = bench_put(corpus, streams, min(args.steps, 200), D)
                results[(match_type, name, bs)] = {"get_us": get_s * 1e6, "put_wps": put_w}
                print(f"[{match_type}] {name:>14} bs={bs:>2}: batch_get {get_s * 1e6:9.1f} us/call   "
                      f"batch_put {put_w:12,.0f} windows/s")
            del corpus

    lines = ["# n-gram corpus benchmark (kernelcache vs SGLang 0.5.23)", "",
             "Command: `KERNELCACHE_DIR=/tmp/kc-bench .venv/bin/python benchmarks/bench_ngram.py`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}; "
             f"shape {SHAPE}; prefill: {args.docs} docs x {args.doc_len} tokens, every 4th 18-token window; "
             f"{args.steps} decode steps, median batch_get latency; batch_put = one 18-token window per "
             "request + synchronize() per call.", ""]
    if skipped:
        lines += [f"SGLang peer skipped: {skipped}", ""]
    sg = f"sglang {SGLANG_VERSION}"
    lines += ["| mode | bs | kernelcache get (us) | sglang get (us) | get speedup | kernelcache put (win/s) | sglang put (win/s) | put speedup |",
              "|---|---|---|---|---|---|---|---|"]
    print()
    for match_type in ("BFS", "PROB"):
        for bs in BATCH_SIZES:
            k = results[(match_type, "kernelcache", bs)]
            s = results.get((match_type, sg, bs))
            if s:
                g_ratio = s["get_us"] / k["get_us"]
                p_ratio = k["put_wps"] / s["put_wps"]
                row = (f"| {match_type} | {bs} | {k['get_us']:.1f} | {s['get_us']:.1f} | {g_ratio:.2f}x | "
                       f"{k['put_wps']:,.0f} | {s['put_wps']:,.0f} | {p_ratio:.2f}x |")
                print(f"{match_type} bs={bs}: batch_get {g_ratio:.2f}x faster, batch_put {p_ratio:.2f}x faster")
            else:
                row = f"| {match_type} | {bs} | {k['get_us']:.1f} | - | - | {k['put_wps']:,.0f} | - | - |"
            lines.append(row)
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
