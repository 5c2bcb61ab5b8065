"""Start-up of one model config's FlashInfer modules: FlashInfer's own JIT vs the route.

The module set of a Llama-3-8B-like config (bf16, head dim 128): batch decode, batch prefill
(FA2), norm, sampling, rope (``--modules`` picks). Every figure is one fresh interpreter (its
start, ``import flashinfer`` and the route's ``install()`` included in ``process``; ``load`` is
the ``build_and_load()`` of every module):

* ``cold``: an empty workspace (route: and an empty cache); the modules are built as a server
  starting lazily builds them (``build_and_load()`` one after another). With ``--prebuild``
  the process first prebuilds the set with ``flashinfer.jit.build_jit_specs`` (routed, for the
  route), as FlashInfer's tests and prebuilding users do. FlashInfer 0.7.4 then compiles every
  module a second time on its ``build_and_load()``: its prebuild runs ninja in ``cached_ops/``,
  its per-module build in the module's own directory, whose ``.ninja_log`` has no entry
  ("command line not found in log"). ``--phase cold`` runs one side (``--side own|route``), so
  a driver can run both sides at once on one machine.
* ``warm``: FlashInfer: its workspace as its cold run left it (ninja no-op + ``load_module``,
  i.e. FlashInfer's own cache); route: the same, on its workspace and cache. Sides alternate.
* ``warm, fresh workspace`` (route): an empty FlashInfer workspace, the cache warm.
* ``fleet`` (route): an empty cache and workspace ("host B"), ``FLASHINFER_DISABLE_JIT=1``,
  every entry fetched from a fleet the route's cache was pushed to: a SeaweedFS S3 store on
  127.0.0.1 started (and stopped, by pid) here when ``weed`` is on PATH, else a ``file://``
  store (the output says which).

    python benchmarks/bench_flashinfer_startup.py --phase cold --side own --dir D      # one side
    python benchmarks/bench_flashinfer_startup.py --phase warm --dir D [--reps 5]      # after both
    python benchmarks/bench_flashinfer_startup.py --dir D                              # all, in turn

``D`` holds ``ws-own``, ``ws-route``, ``cache`` and the JSON results. kernelcache is byte-compiled
first (an installed package has its ``.pyc``). Not a test.
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
_B = "torch.bfloat16, torch.bfloat16, torch.bfloat16"
GEN = {
    "decode": f"m.gen_batch_decode_module({_B}, torch.int32, 128, 128, 0, False, False)",
    "prefill": f"m.gen_batch_prefill_module('fa2', {_B}, torch.int32, 128, 128, 0, False, False, False)",
    "norm": "norm.gen_norm_module()",
    "sampling": "sampling.gen_sampling_module()",
    "rope": "rope.gen_rope_module()",
    "silu": "activation.gen_act_and_mul_module('silu')",  # one small module: a smoke run
}
CHILD = """
import json, time
t0 = time.perf_counter()
import torch, flashinfer
import flashinfer.jit
from flashinfer.jit import activation, norm, rope, sampling
from flashinfer.jit.attention import modules as m
{route}
t1 = time.perf_counter()
specs = [{gens}]
t2 = time.perf_counter()
if {prebuild}:
    flashinfer.jit.build_jit_specs(specs, verbose=False)
t3 = time.perf_counter()
for s in specs:
    s.build_and_load()
t4 = time.perf_counter()
print(json.dumps({{"imports": t1 - t0, "gen": t2 - t1, "prebuild": t3 - t2, "load": t4 - t3,
                  "paths": [str(s.get_library_path()) for s in specs]}}))
"""
ROUTE = "import kernelcache.flashinfer as kf\nassert kf.install()"
PUSH = "import kernelcache as kc; print(len(kc.push()))"


def child(env: dict, modules: list[str], route: bool, prebuild: bool) -> dict:
    code = CHILD.format(route=ROUTE if route else "", gens=", ".join(GEN[x] for x in modules), prebuild=prebuild)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"child failed ({'route' if route else 'own'}):\n{p.stderr[-4000:]}")
    out = json.loads(p.stdout.splitlines()[-1])
    out["process"] = wall
    return out


def _stub_libcuda() -> str:
    """A stub ``libcuda.so`` to link against on a machine without a driver (nothing runs here)."""
    d = Path(tempfile.gettempdir()) / "kc-bench-fi-stub"
    d.mkdir(exist_ok=True)
    if not (d / "libcuda.so").exists():
        (d / "e.c").write_text("int kc_libcuda_stub;\n")
        subprocess.run(["gcc", "-shared", "-o", str(d / "libcuda.so"), "-Wl,-soname,libcuda.so.1", str(d / "e.c")],
                       check=True)
    return str(d)


def base_env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_WORKSPACE"))}
    if not shutil.which("nvidia-smi"):
        e["FLASHINFER_EXTRA_LDFLAGS"] = (e.get("FLASHINFER_EXTRA_LDFLAGS", "") + f" -L{_stub_libcuda()}").strip()
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e["KERNELCACHE_LOG"] = "0"
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e.pop("KERNELCACHE_PATCH", None)
    return e


def env_for(ws: Path, cache: Path, **extra: str) -> dict:
    return {**base_env(), "FLASHINFER_WORKSPACE_BASE": str(ws), "KERNELCACHE_DIR": str(cache), **extra}


def cold(d: Path, side: str, modules: list[str], prebuild: bool) -> dict:
    ws = d / f"ws-{side}"
    shutil.rmtree(ws, ignore_errors=True)
    if side == "route":
        shutil.rmtree(d / "cache", ignore_errors=True)
    out = child(env_for(ws, d / "cache"), modules, route=side == "route", prebuild=prebuild)
    out["prebuild_first"] = prebuild
    out["load_avg"] = os.getloadavg()[0]
    (d / f"cold-{side}.json").write_text(json.dumps(out, indent=1))
    return out


class Fleet:
    """Where the route's cache is pushed: SeaweedFS S3 on 127.0.0.1 (the tests' server helper,
    started and stopped by pid) when ``weed`` is installed, else a file:// store."""

    def __init__(self, d: Path) -> None:
        self.server = None
        try:
            sys.path.insert(0, str(REPO / "tests" / "remote"))
            from servers import S3Server, weed_binary  # noqa: PLC0415 - the tests' helper

            weed_binary()
        except (ImportError, FileNotFoundError):
            self.kind, self.env = "file:// (no weed here)", {"KERNELCACHE_REMOTE": f"file://{d / 'fleet'}"}
            return
        self.server = S3Server("seaweed", d / "seaweed")
        (d / "seaweed").mkdir(exist_ok=True)
        self.server.start()
        self.kind = f"SeaweedFS S3 ({self.server.endpoint})"
        self.env = {**self.server.env, "KERNELCACHE_REMOTE": self.server.url("kc-bench-fi")}

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def warm(d: Path, modules: list[str], reps: int) -> dict:
    res: dict = {"modules": modules, "load_avg_before": os.getloadavg()[0]}
    own, route, fresh = [], [], []
    for i in range(reps):  # sides alternate
        own.append(child(env_for(d / "ws-own", d / "unused"), modules, route=False, prebuild=False))
        route.append(child(env_for(d / "ws-route", d / "cache"), modules, route=True, prebuild=False))
        fresh.append(child(env_for(d / f"ws-fresh{i}", d / "cache"), modules, route=True, prebuild=False))
    for name, runs in (("warm_own", own), ("warm_route", route), ("warm_route_fresh_ws", fresh)):
        for k in ("process", "load"):
            res[f"{name}_{k}"] = statistics.median(r[k] for r in runs)
    fleet = Fleet(d)
    try:
        res["fleet_store"] = fleet.kind
        p = subprocess.run([sys.executable, "-c", PUSH], capture_output=True, text=True,
                           env=env_for(d / "ws-route", d / "cache", KERNELCACHE_REMOTE_MODE="readwrite", **fleet.env))
        if p.returncode != 0:
            raise SystemExit(f"push failed:\n{p.stderr[-3000:]}")
        res["pushed_entries"] = int(p.stdout.split()[-1])
        fl = [child(env_for(d / f"ws-b{i}", d / f"cache-b{i}", KERNELCACHE_REMOTE_MODE="read",
                            FLASHINFER_DISABLE_JIT="1", **fleet.env), modules, route=True, prebuild=False)
              for i in range(max(1, reps // 2))]
    finally:
        fleet.stop()
    res["fleet_route_process"] = statistics.median(r["process"] for r in fl)
    res["fleet_route_load"] = statistics.median(r["load"] for r in fl)
    res["ratio_warm_process"] = res["warm_route_process"] / res["warm_own_process"]
    res["ratio_warm_load"] = res["warm_route_load"] / res["warm_own_load"]
    res["load_avg_after"] = os.getloadavg()[0]
    res["raw"] = {"own": own, "route": route, "fresh": fresh, "fleet": fl}
    (d / "warm.json").write_text(json.dumps(res, indent=1))
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("cold", "warm", "all"), default="all")
    ap.add_argument("--side", choices=("own", "route"))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--modules", default="decode,prefill,norm,sampling,rope")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prebuild", action="store_true", help="cold: build_jit_specs the set first")
    a = ap.parse_args()
    d = Path(a.dir).resolve()
    d.mkdir(parents=True, exist_ok=True)
    modules = a.modules.split(",")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "kernelcache")], check=True)
    if a.phase == "cold":
        if not a.side:
            raise SystemExit("--phase cold needs --side own|route")
        print(json.dumps(cold(d, a.side, modules, a.prebuild)))
        return
    if a.phase == "all":
        for side in ("own", "route"):
            print(side, json.dumps(cold(d, side, modules, a.prebuild)))
    res = warm(d, modules, a.reps)
    for side in ("own", "route"):
        f = d / f"cold-{side}.json"
        if f.exists():
            c = json.loads(f.read_text())
            res[f"cold_{side}_process"] = c["process"]
    if "cold_own_process" in res and "cold_route_process" in res:
        res["ratio_cold_process"] = res["cold_route_process"] / res["cold_own_process"]
    for k, v in res.items():
        if k != "raw":
            print(f"{k:28s} {v:.4f}" if isinstance(v, float) else f"{k:28s} {v}")


if __name__ == "__main__":
    main()
