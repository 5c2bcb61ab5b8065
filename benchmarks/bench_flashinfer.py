"""FlashInfer drop-in benchmark: start-up of a module set, FlashInfer's own JIT vs the route.

Every figure is one fresh interpreter that imports flashinfer (not timed) and then times the
``build_and_load()`` of every module of the set (the model's start-up cost in JIT):

* cold:  FlashInfer: empty workspace; route: empty workspace and empty kernelcache cache.
* warm:  FlashInfer: its workspace as the cold run left it (ninja no-op + load_module);
         route: the same process kind on its workspace and cache (entry check + load).
* warm, fresh workspace (route only): an empty FlashInfer workspace, the kernelcache cache warm.
* fleet (route only): an empty cache on "host B" fetching every entry from a file:// fleet
  cache the cold run pushed to.
* FlashInfer's own cache under the route: the route on a workspace FlashInfer built (no use of
  FlashInfer's .so files: the route compiles; shows what switching costs once).

Sides alternate for the warm figures (``--warm-reps``), medians printed with the ratio
route/FlashInfer (goals: cold <= 1.05x, warm <= 1.0x). Not a test.

    python benchmarks/bench_flashinfer.py [--modules silu] [--warm-reps 5] [--arch 9.0a] [--skip-own-cache]
    python benchmarks/bench_flashinfer.py --warm-only OWN_WS KC_WS KC_CACHE   # warm figures on built dirs

kernelcache's modules are byte-compiled first (``compileall``) and children may write ``.pyc``,
as an installed package has them (``PYTHONDONTWRITEBYTECODE=1`` would recompile every import).

Modules: silu (activation, one generated .cu), norm, sampling, rope, decode (batch decode bf16,
head dim 128), prefill (batch prefill FA2 bf16, head dim 128). On a machine without a GPU the
arch must be given (FLASHINFER_CUDA_ARCH_LIST) and linking needs a libcuda (a stub is built).
"""
from __future__ import annotations

import argparse
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
GEN = {
    "silu": "from flashinfer.jit.activation import gen_act_and_mul_module as g; specs.append(g('silu'))",
    "norm": "from flashinfer.jit.norm import gen_norm_module as g; specs.append(g())",
    "sampling": "from flashinfer.jit.sampling import gen_sampling_module as g; specs.append(g())",
    "rope": "from flashinfer.jit.rope import gen_rope_module as g; specs.append(g())",
    "decode": ("import torch; from flashinfer.jit.attention.modules import gen_batch_decode_module as g; "
               "specs.append(g(torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 128, 128, 0, False, False))"),
    "prefill": ("import torch; from flashinfer.jit.attention.modules import gen_batch_prefill_module as g; "
                "specs.append(g('fa2', torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 128, 128, 0, "
                "False, False, False))"),
}
CHILD = """
import json, time, sys
import flashinfer
{route}
specs = []
{gens}
t0 = time.perf_counter()
for s in specs:
    s.build_and_load()
print(json.dumps({{"seconds": time.perf_counter() - t0,
                  "paths": [str(s.get_library_path()) for s in specs]}}))
"""
PUSH = "import kernelcache as kc; kc.push()"


def _stub(tmp: Path) -> Path:
    d = tmp / "stub"
    d.mkdir(exist_ok=True)
    (d / "e.c").write_text("int kc_libcuda_stub;\n")
    subprocess.run(["gcc", "-shared", "-o", str(d / "libcuda.so"), "-Wl,-soname,libcuda.so.1", str(d / "e.c")],
                   check=True)
    return d


def _env(base: dict, ws: Path, cache: Path, **extra: str) -> dict:
    e = dict(base)
    e.update({"FLASHINFER_WORKSPACE_BASE": str(ws), "KERNELCACHE_DIR": str(cache), **extra})
    return e


def _run(env: dict, modules: list[str], route: bool) -> dict:
    code = CHILD.format(route="import kernelcache.flashinfer as kf; assert kf.install()" if route else "",
                        gens="\n".join(GEN[m] for m in modules))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{p.stderr[-4000:]}")
    out = json.loads(p.stdout.splitlines()[-1])
    out["process"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modules", default="silu")
    ap.add_argument("--warm-reps", type=int, default=5)
    ap.add_argument("--arch", default=os.environ.get("FLASHINFER_CUDA_ARCH_LIST", ""))
    ap.add_argument("--skip-own-cache", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--warm-only", nargs=3, metavar=("OWN_WS", "KC_WS", "KC_CACHE"))
    a = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "kernelcache")], check=True)
    modules = a.modules.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-fi-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_WORKSPACE"))}
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    base["KERNELCACHE_LOG"] = "0"
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    if a.arch:
        base["FLASHINFER_CUDA_ARCH_LIST"] = a.arch
    if not shutil.which("nvidia-smi"):
        base["FLASHINFER_EXTRA_LDFLAGS"] = (base.get("FLASHINFER_EXTRA_LDFLAGS", "") + f" -L{_stub(tmp)}").strip()
    if a.warm_only:
        own_ws, kc_ws, kc_cache = (Path(p) for p in a.warm_only)
        wo, wr = [], []
        for _ in range(a.warm_reps):
            wo.append(_run(_env(base, own_ws, tmp / "unused"), modules, route=False)["seconds"])
            wr.append(_run(_env(base, kc_ws, kc_cache), modules, route=True)["seconds"])
        print(f"load {os.getloadavg()[0]:.1f}  warm_own {statistics.median(wo):.4f}  warm_route "
              f"{statistics.median(wr):.4f}  ratio {statistics.median(wr) / statistics.median(wo):.3f}")
        print("own", [round(x, 4) for x in wo], "route", [round(x, 4) for x in wr])
        return
    fleet = f"file://{tmp / 'fleet'}"
    own_ws, kc_ws, kc_cache = tmp / "ws-own", tmp / "ws-kc", tmp / "cache"
    res: dict = {"modules": modules, "load": os.getloadavg()[0]}
    res["cold_own"] = _run(_env(base, own_ws, tmp / "unused"), modules, route=False)["seconds"]
    res["cold_route"] = _run(_env(base, kc_ws, kc_cache), modules, route=True)["seconds"]
    warm_own, warm_route, fresh_ws = [], [], []
    for i in range(a.warm_reps):
        warm_own.append(_run(_env(base, own_ws, tmp / "unused"), modules, route=False)["seconds"])
        warm_route.append(_run(_env(base, kc_ws, kc_cache), modules, route=True)["seconds"])
        fresh_ws.append(_run(_env(base, tmp / f"ws-fresh{i}", kc_cache), modules, route=True)["seconds"])
    res["warm_own"], res["warm_route"] = statistics.median(warm_own), statistics.median(warm_route)
    res["warm_route_fresh_ws"] = statistics.median(fresh_ws)
    subprocess.run([sys.executable, "-c", PUSH], check=True,
                   env=_env(base, kc_ws, kc_cache, KERNELCACHE_REMOTE=fleet, KERNELCACHE_REMOTE_MODE="readwrite"))
    fl = [_run(_env(base, tmp / f"ws-b{i}", tmp / f"cache-b{i}", KERNELCACHE_REMOTE=fleet,
                    KERNELCACHE_REMOTE_MODE="read", FLASHINFER_DISABLE_JIT="1"), modules, route=True)["seconds"]
          for i in range(max(1, a.warm_reps // 2))]
    res["fleet_route"] = statistics.median(fl)
    if not a.skip_own_cache:
        res["route_on_own_workspace_cold"] = _run(_env(base, own_ws, tmp / "cache-own"), modules,
                                                   route=True)["seconds"]
    res["ratio_cold"] = res["cold_route"] / res["cold_own"]
    res["ratio_warm"] = res["warm_route"] / res["warm_own"]
    for k, v in res.items():
        print(f"{k:32s} {v:.4f}" if isinstance(v, float) else f"{k:32s} {v}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
