"""First load of an SGLang JIT module: SGLang's own JIT cache vs the route.

``--module ngram`` (default): the n-gram corpus (C++, five sources). ``--module cutlass``:
``moe_finalize_fuse_shared`` (one CUDA unit with SGLang's registered CUTLASS headers, found in
FlashInfer's ``data/cutlass``), built for the GPU it runs on (or ``--arch 9.0`` without one).

Every figure is one fresh interpreter; ``load`` is the ``get_ngram_corpus_cls()`` call (SGLang's
``load_jit("ngram_corpus", ...)`` and the class registration), timed inside the child after
``sglang`` and its n-gram op module are imported (the same imports on both sides; the route's
import hook runs during them). ``process`` is the child's whole wall time.

* ``cold``: SGLang: an empty ``SGLANG_JIT_CACHE_DIR``; route: an empty kernelcache cache and an
  empty ``SGLANG_JIT_CACHE_DIR``. Sides alternate, ``--cold-reps`` each.
* ``warm``: SGLang: its cache as its first cold run left it; route: the kernelcache cache as its
  first cold run left it and a fresh, empty ``SGLANG_JIT_CACHE_DIR`` every time (the acceptance
  case). Sides alternate, ``--reps`` each; medians reported. ``--cold-reps 0`` with the ``--dir``
  of an earlier run measures the warm phase again on its caches.

    python benchmarks/bench_sglang.py [--module ngram|cutlass] [--arch 9.0] [--reps 9] [--cold-reps 3] [--dir D]

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
CHILDREN = {
    "ngram": """
import json, time
t0 = time.perf_counter()
from sglang.kernels.ops.speculative import ngram_corpus as ops
t1 = time.perf_counter()
ops.get_ngram_corpus_cls()
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1,
                  "routed": bool(getattr(ops.load_jit, "__kernelcache_dropin__", False))}))
""",
    "cutlass": """
import contextlib, json, os, time
t0 = time.perf_counter()
from sglang.kernels.ops.moe import moe_finalize_fuse_shared as ops
from sglang.kernels.jit.utils import override_jit_cuda_arch
t1 = time.perf_counter()
arch = os.environ.get("BENCH_SGLANG_ARCH")
with (override_jit_cuda_arch(*map(int, arch.split("."))) if arch else contextlib.nullcontext()):
    ops._jit_module()
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1,
                  "routed": bool(getattr(ops.load_jit, "__kernelcache_dropin__", False))}))
""",
}
CHILD = CHILDREN["ngram"]


def child(route: bool, kc: Path, sg: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "SGLANG_"))}
    env.update({"KERNELCACHE_DIR": str(kc), "SGLANG_JIT_CACHE_DIR": str(sg), "KERNELCACHE_LOG": "0",
                "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")})
    if route:
        env["KERNELCACHE_PATCH"] = "sglang"
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.splitlines()[-1])
    if out["routed"] != route:
        raise SystemExit(f"child routed={out['routed']}, expected {route}")
    out["process"] = wall
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--cold-reps", type=int, default=3)
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
    res: dict = {"cold": {"own": [], "route": []}, "warm": {"own": [], "route": []}}
    # the warm phase uses the first cold run's caches as they were left (not copies: a copy is
    # another set of files, which the route's recall memo did not witness)
    warm_kc, warm_sg = base / "cold-0-route-kc", base / "cold-0-own-sg"
    for i in range(ns.cold_reps):
        for side in ("own", "route"):
            kc, sg = base / f"cold-{i}-{side}-kc", base / f"cold-{i}-{side}-sg"
            shutil.rmtree(kc, ignore_errors=True)
            shutil.rmtree(sg, ignore_errors=True)
            res["cold"][side].append(child(side == "route", kc, sg))
    if not (warm_kc.is_dir() and warm_sg.is_dir()):
        raise SystemExit(f"no warm caches in {base} (run with --cold-reps >= 1 first)")
    for i in range(ns.reps):
        res["warm"]["own"].append(child(False, base / "unused-kc", warm_sg))
        fresh = base / f"fresh-sg-{i}"
        res["warm"]["route"].append(child(True, warm_kc, fresh))
        if fresh.exists():
            raise SystemExit("a routed load wrote SGLANG_JIT_CACHE_DIR")
    summary = {}
    for phase in [p for p in ("cold", "warm") if res[p]["own"]]:
        row = {}
        for side in ("own", "route"):
            for field in ("load", "process"):
                row[f"{side}_{field}_s"] = statistics.median(r[field] for r in res[phase][side])
        row["load_ratio"] = row["route_load_s"] / row["own_load_s"]
        row["process_ratio"] = row["route_process_s"] / row["own_process_s"]
        summary[phase] = row
    (base / "bench_sglang.json").write_text(json.dumps({"module": ns.module, "runs": res, "summary": summary},
                                                       indent=1))
    print(f"results: {base / 'bench_sglang.json'}")
    for phase, row in summary.items():
        print(f"{phase:5}  load: SGLang {row['own_load_s'] * 1e3:9.1f} ms  route {row['route_load_s'] * 1e3:9.1f} ms  "
              f"ratio {row['load_ratio']:.3f}   process: SGLang {row['own_process_s']:.2f} s  "
              f"route {row['route_process_s']:.2f} s  ratio {row['process_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
