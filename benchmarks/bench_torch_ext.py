"""torch drop-in benchmark: ``kernelcache.cpp_extension.load`` vs ``torch.utils.cpp_extension.load``.

* warm: the extension is built; each side loads it in a fresh interpreter, ``import torch`` and
  the side's own module imported before the clock (an application imports its JIT module once),
  so only the ``load`` call is timed. torch re-hashes the sources, rewrites ``build.ninja`` and
  runs ninja; the drop-in checks its entry and imports it. Sides alternate, N repetitions,
  medians and the torch/drop-in speed-up are printed (goal: >= 5x).
* cold: each side builds the same extension into an empty cache / extensions dir in a fresh
  interpreter (``load`` timed, build included), alternating, N repetitions; the ratio
  drop-in/torch is printed (goal: <= 1.05x).

Not a test. ``--source small`` (default) is a one-function pybind11 module; ``--source
extension`` includes ``torch/extension.h`` (~40 s per compile on a 2-core machine).

    python benchmarks/bench_torch_ext.py [--warm-reps 9] [--cold-reps 1] [--source small|extension]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = {
    "small": "#include <pybind11/pybind11.h>\n"
             "int add(int a, int b) { return a + b; }\n"
             "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add\", &add); }\n",
    "extension": "#include <torch/extension.h>\n"
                 "torch::Tensor add(torch::Tensor a, torch::Tensor b) { return a + b; }\n"
                 "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add\", &add); }\n",
}
TIMED = """
import json, sys, time
import torch
side, name, src = sys.argv[1], sys.argv[2], sys.argv[3]
if side == "torch":
    from torch.utils import cpp_extension as ce
else:
    from kernelcache import cpp_extension as ce
    import kernelcache
    kernelcache.load_with_result  # the loader is imported lazily on first use: not timed
t0 = time.perf_counter()
mod = ce.load(name, [src])
t1 = time.perf_counter()
assert mod.add(2, 3) == 5 if not hasattr(mod.add(torch.ones(1), torch.ones(1)), "shape") else True
print("RESULT " + json.dumps({"load_s": t1 - t0}))
"""


def _run(side: str, env: dict, name: str, src: Path) -> float:
    p = subprocess.run([sys.executable, "-c", TIMED, side, name, str(src)], env=env, capture_output=True, text=True,
                       timeout=1800, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["load_s"]
    raise RuntimeError(f"{side} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def _env(work: Path, tag: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(KERNELCACHE_DIR=str(work / f"kc-{tag}"), KERNELCACHE_LOCK_DIR=str(work / f"locks-{tag}"),
               TORCH_EXTENSIONS_DIR=str(work / f"torch-{tag}"), KERNELCACHE_LOG="0",
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def bench(warm_reps: int, cold_reps: int, source: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="kc-bench-torch-"))
    try:
        src = work / "bench_ext.cpp"
        src.write_text(SOURCES[source])
        name = f"kc_bench_{source}"
        cold: dict[str, list[float]] = {"torch": [], "dropin": []}
        for i in range(cold_reps):
            for side in ("torch", "dropin") if i % 2 == 0 else ("dropin", "torch"):
                cold[side].append(_run(side, _env(work, f"cold{i}"), name, src))
        warm_env = _env(work, "warm")
        for side in ("torch", "dropin"):  # build both once (not timed)
            _run(side, warm_env, name, src)
        warm: dict[str, list[float]] = {"torch": [], "dropin": []}
        for i in range(warm_reps):
            for side in ("torch", "dropin") if i % 2 == 0 else ("dropin", "torch"):
                warm[side].append(_run(side, warm_env, name, src))
        out = {"source": source, "warm_reps": warm_reps, "cold_reps": cold_reps}
        for kind, data in (("warm", warm), ("cold", cold)):
            if data["torch"]:
                t, d = statistics.median(data["torch"]), statistics.median(data["dropin"])
                out[kind] = {"torch_ms": round(t * 1e3, 2), "dropin_ms": round(d * 1e3, 2),
                             "torch_over_dropin": round(t / d, 2), "dropin_over_torch": round(d / t, 3)}
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm-reps", type=int, default=9)
    ap.add_argument("--cold-reps", type=int, default=1)
    ap.add_argument("--source", choices=sorted(SOURCES), default="small")
    a = ap.parse_args()
    r = bench(a.warm_reps, a.cold_reps, a.source)
    print(json.dumps(r, indent=1))
    if "warm" in r:
        w = r["warm"]
        print(f"warm load, fresh process: drop-in {w['dropin_ms']} ms vs torch {w['torch_ms']} ms: "
              f"{w['torch_over_dropin']}x faster (goal >= 5x)")
    if "cold" in r:
        c = r["cold"]
        print(f"cold build: drop-in {c['dropin_ms'] / 1e3:.1f} s vs torch {c['torch_ms'] / 1e3:.1f} s: "
              f"{c['dropin_over_torch']}x (goal <= 1.05x)")


if __name__ == "__main__":
    main()
