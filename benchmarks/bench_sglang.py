"""First load of an SGLang JIT module: SGLang's own JIT cache vs the route.

``--module ngram`` (default): the n-gram corpus (C++, five sources). ``--module cutlass``:
``moe_finalize_fuse_shared`` (one CUDA unit with SGLang's registered CUTLASS headers, found in
FlashInfer's ``data/cutlass``), built for the GPU it runs on (or ``--arch 9.0`` without one).

Every figure is one fresh interpreter; ``load`` is the ``get_ngram_corpus_cls()`` call (SGLang's
``load_jit("ngram_corpus", ...)`` and the class registration), timed inside the child after
``sglang`` and its n-gram op module are imported (the same imports on both sides; the route's
import hook runs during them). ``process`` is the child's whole wall time.

* ``cold``: SGLang: an empty ``SGLANG_JIT_CACHE_DIR``; route: an empty kernelcache cache and an
  empty ``SGLANG_JIT_CACHE_DIR``. ``--cold-reps`` each (default 5), sides alternating (which side
  goes first alternates too).
* ``warm``: SGLang: its cache as its first cold run left it; route: the kernelcache cache as its
  first cold run left it and a fresh, empty ``SGLANG_JIT_CACHE_DIR`` every time (the acceptance
  case). ``--reps`` each (default 11), sides alternating. ``--cold-reps 0`` with the ``--dir``
  of an earlier run measures the warm phases again on its caches.
* ``warm_past_floor``: as ``warm``, but the child pays what both JITs pay inside a first load
  before the timed call (``import tvm_ffi`` and SGLang's CUDA arch detection, torch's CUDA
  initialisation on a GPU): ``load`` is what each JIT adds, ``floor`` what was paid before it.
  ``--floor-reps`` each (default 5; 0: none).

* ``--stages N``: N routed warm processes past the floor that time the route's steps of a
  recalled call one by one, as ``kernelcache.sglang._route.load`` runs them (imports, the gate,
  SGLang's resolution, the digest, the memo read, the re-stat, ``recall_entry``: read, re-stat
  and ``tvm_ffi.load_module``).

Medians are reported with the spread (min-max, n) of every figure; the ratio is route / SGLang of
the medians. All runs of all phases go to ``DIR/bench_sglang.json``.

    python benchmarks/bench_sglang.py [--module ngram|cutlass] [--arch 9.0] [--reps 11] [--cold-reps 5]
                                      [--floor-reps 5] [--stages 0] [--dir D]

kernelcache is byte-compiled first (an installed package has its ``.pyc``; SGLang's were written
by pip). Not a test.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The child: import the op module (both sides alike; the route's import hook runs here), then time
# the first load. BENCH_SGLANG_FLOOR=1 pays the floor both JITs pay inside a first load before the
# timed call: ``import tvm_ffi`` (SGLang's build-file generation imports it) and SGLang's CUDA arch
# detection (``get_jit_cuda_arch``: torch's CUDA initialisation on a GPU machine), so ``load`` is then
# what each JIT itself adds.
CHILD_TEMPLATE = """
import contextlib, json, os, time
t0 = time.perf_counter()
from sglang.kernels.ops.{package} import {module} as ops
from sglang.kernels.jit.utils import override_jit_cuda_arch
t1 = time.perf_counter()
arch = os.environ.get("BENCH_SGLANG_ARCH")
floor = None
with contextlib.ExitStack() as stack:
    if os.environ.get("BENCH_SGLANG_FLOOR"):
        f0 = time.perf_counter()
        import tvm_ffi
        from sglang.kernels.jit.utils.arch import get_jit_cuda_arch
        if arch:
            stack.enter_context(override_jit_cuda_arch(*map(int, arch.split("."))))
        get_jit_cuda_arch()
        floor = time.perf_counter() - f0
        t1 = time.perf_counter()
    elif arch:
        stack.enter_context(override_jit_cuda_arch(*map(int, arch.split("."))))
    ops.{call}()
    t2 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "load": t2 - t1, "floor": floor,
                  "routed": bool(getattr(ops.load_jit, "__kernelcache_dropin__", False))}}))
"""
CHILDREN = {
    "ngram": CHILD_TEMPLATE.format(package="speculative", module="ngram_corpus", call="get_ngram_corpus_cls"),
    "cutlass": CHILD_TEMPLATE.format(package="moe", module="moe_finalize_fuse_shared", call="_jit_module"),
}
CHILD = CHILDREN["ngram"]
# --stages: the route's steps on a recalled call, timed one by one in a fresh routed process past the
# floor (as _route.load runs them; the module's own load_jit arguments, as its op module passes them)
STAGES_CHILD = """
import json, os, time
T = time.perf_counter
from sglang.kernels.ops.{package} import {module} as ops
from sglang.kernels.jit.utils import override_jit_cuda_arch
import tvm_ffi
import sglang.kernels.jit.utils.compile.loader as loader
arch = os.environ.get("BENCH_SGLANG_ARCH")
arch_override = override_jit_cuda_arch(*map(int, arch.split("."))) if arch else None
if arch_override is not None:
    arch_override.__enter__()  # held: a collected override puts the detected arch back
loader.get_default_target_flags()
out = {{}}
t = T(); from kernelcache.lookup import recall; from kernelcache.sglang import _gate, _request, _route; out["imports"] = T() - t
t = T(); _gate.call_refusal(loader); out["call_refusal"] = T() - t
t = T(); req = _request.resolve(loader, {args!r}, {kwargs!r}); out["resolve"] = T() - t
t = T(); d = _route._digest(req); out["digest"] = T() - t
t = T(); rec = recall.read_file(recall.memo_path(d)); out["memo_read"] = T() - t
t = T(); ok = rec is not None and recall.holds(rec); out["restat"] = T() - t
t = T(); got = recall.recall_entry(d); out["recall_entry"] = T() - t
assert ok and got is not None, "not recalled"
print(json.dumps(out))
"""
STAGES = {
    "ngram": STAGES_CHILD.format(package="speculative", module="ngram_corpus", args=("ngram_corpus",), kwargs={
        "cpp_files": [f"ngram_corpus/{f}.cpp" for f in ("result", "trie", "suffix_automaton", "ngram",
                                                         "ngram_corpus_ffi")], "header_only": False}),
    "cutlass": STAGES_CHILD.format(package="moe", module="moe_finalize_fuse_shared", args=("moe_finalize_fuse_shared",),
                                   kwargs={"cuda_files": ["moe/moe_finalize_fuse_shared.cu"],
                                           "extra_dependencies": ["cutlass"], "header_only": False}),
}


def child(route: bool, kc: Path, sg: Path, floor: bool = False, code: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "SGLANG_", "BENCH_SGLANG_FLOOR"))}
    env.update({"KERNELCACHE_DIR": str(kc), "SGLANG_JIT_CACHE_DIR": str(sg), "KERNELCACHE_LOG": "0",
                "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")})
    if route:
        env["KERNELCACHE_PATCH"] = "sglang"
    if floor:
        env["BENCH_SGLANG_FLOOR"] = "1"
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code or CHILD], env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.splitlines()[-1])
    if code is None and out["routed"] != route:
        raise SystemExit(f"child routed={out['routed']}, expected {route}")
    out["process"] = wall
    return out


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarise(res: dict) -> dict:
    """Per phase and side: median, min, max and count of ``load``, ``process`` (and ``floor`` where
    measured); the ratios are of the medians (route / SGLang)."""
    summary = {}
    for phase, sides in res.items():
        if not sides["own"] or not sides["route"]:
            continue
        row: dict = {}
        for side in ("own", "route"):
            for field in ("load", "process", "floor"):
                vals = [r[field] for r in sides[side] if r.get(field) is not None]
                if vals:
                    row[f"{side}_{field}"] = _stats(vals)
        row["load_ratio"] = row["route_load"]["median"] / row["own_load"]["median"]
        row["process_ratio"] = row["route_process"]["median"] / row["own_process"]["median"]
        summary[phase] = row
    return summary


def _ms(st: dict) -> str:
    return f"{st['median'] * 1e3:9.1f} ms [{st['min'] * 1e3:.1f}-{st['max'] * 1e3:.1f}, n={st['n']}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=11, help="warm runs per side")
    ap.add_argument("--cold-reps", type=int, default=5, help="cold runs per side")
    ap.add_argument("--floor-reps", type=int, default=5,
                    help="warm runs per side with the shared floor paid before the timed call (0: none)")
    ap.add_argument("--stages", type=int, default=0,
                    help="routed runs timing the route's steps of a recalled call one by one (past the floor)")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--module", choices=sorted(CHILDREN), default="ngram")
    ap.add_argument("--arch", default=None, help="cutlass: build for this arch (e.g. 9.0) without a GPU")
    ns = ap.parse_args()
    global CHILD
    CHILD = CHILDREN[ns.module]
    if ns.arch:
        os.environ["BENCH_SGLANG_ARCH"] = ns.arch
    compileall.compile_dir(str(REPO / "kernelcache"), quiet=1)
    base = ns.dir or Path(tempfile.mkdtemp(prefix="kc-bench-sglang-"))
    base.mkdir(parents=True, exist_ok=True)
    res: dict = {"cold": {"own": [], "route": []}, "warm": {"own": [], "route": []},
                 "warm_past_floor": {"own": [], "route": []}}
    # the warm phase uses the first cold run's caches as they were left (not copies: a copy is
    # another set of files, which the route's recall memo did not witness)
    warm_kc, warm_sg = base / "cold-0-route-kc", base / "cold-0-own-sg"
    for i in range(ns.cold_reps):
        for side in ("own", "route") if i % 2 == 0 else ("route", "own"):
            kc, sg = base / f"cold-{i}-{side}-kc", base / f"cold-{i}-{side}-sg"
            shutil.rmtree(kc, ignore_errors=True)
            shutil.rmtree(sg, ignore_errors=True)
            res["cold"][side].append(child(side == "route", kc, sg))
            print(f"cold {i} {side}: load {res['cold'][side][-1]['load'] * 1e3:.1f} ms", flush=True)
    if not (warm_kc.is_dir() and warm_sg.is_dir()):
        raise SystemExit(f"no warm caches in {base} (run with --cold-reps >= 1 first)")
    runs = [("warm", i, False) for i in range(ns.reps)] + [("warm_past_floor", i, True) for i in range(ns.floor_reps)]
    for phase, i, floor in runs:
        for side in ("own", "route") if i % 2 == 0 else ("route", "own"):
            if side == "own":
                res[phase]["own"].append(child(False, base / "unused-kc", warm_sg, floor))
                continue
            fresh = base / f"fresh-sg-{phase}-{i}"
            res[phase]["route"].append(child(True, warm_kc, fresh, floor))
            if fresh.exists():
                raise SystemExit("a routed load wrote SGLANG_JIT_CACHE_DIR")
    stages = []
    try:  # a step-by-step run that fails (say, another SGLang's arguments) costs only its own rows
        stages = [child(True, warm_kc, base / f"fresh-sg-stages-{i}", code=STAGES[ns.module])
                  for i in range(ns.stages)]
    except SystemExit as e:
        print(f"--stages: {e}", file=sys.stderr)
    summary = summarise(res)
    (base / "bench_sglang.json").write_text(json.dumps({"module": ns.module, "arch": ns.arch, "runs": res,
                                                       "stages": stages, "summary": summary}, indent=1))
    print(f"results: {base / 'bench_sglang.json'}")
    for phase, row in summary.items():
        print(f"{phase:15}  load: SGLang {_ms(row['own_load'])}  route {_ms(row['route_load'])}  "
              f"ratio {row['load_ratio']:.3f}")
        print(f"{'':15}  process: SGLang {row['own_process']['median']:.2f} s  "
              f"route {row['route_process']['median']:.2f} s  ratio {row['process_ratio']:.3f}")
        if "own_floor" in row:
            print(f"{'':15}  floor paid before the call: SGLang {_ms(row['own_floor'])}  route {_ms(row['route_floor'])}")
    if stages:
        print("route's steps of a recalled call, past the floor (median ms [min-max]): " + ", ".join(
            f"{k} {statistics.median(r[k] for r in stages) * 1e3:.2f} [{min(r[k] for r in stages) * 1e3:.2f}-"
            f"{max(r[k] for r in stages) * 1e3:.2f}]" for k in stages[0] if k != "process"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
