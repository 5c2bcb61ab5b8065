"""Import cost and first warm load through the tvm-ffi drop-in, from an installed wheel, cached bytecode.

Builds a wheel of this tree, installs it into a temporary venv (``--system-site-packages``; the
running interpreter's packages, tvm_ffi and torch included, on its path), compiles its bytecode,
then starts fresh interpreters. In each, ``import tvm_ffi`` runs first (not timed: both sides pay
it; it imports torch when torch is installed), then the clock covers:

* ``baseline``: ``import tvm_ffi.cpp`` (what a tvm-ffi user pays for the JIT module itself);
* ``route``: ``import kernelcache.tvm_ffi`` + the hook armed by ``KERNELCACHE_PATCH`` (what a
  process routing tvm-ffi through the drop-in pays before its first call);
* ``first call``: ``route`` + what a warm ``load_inline`` imports on top: the drop-in's argument
  and source helpers, the spec and the loader modules (``kernelcache.load``);
* issue 24's warm loads of one small kernel (built before, not timed):
  ``tvm load`` (``tvm_ffi.cpp.load_inline``, its module imported before the clock),
  ``tvm import+load``, ``kc import+load`` (``kernelcache.tvm_ffi.load_inline``: the import of
  kernelcache, the drop-in and the loader on the clock, as in the first load of a fresh process)
  and ``kc load`` (the drop-in imported before the clock; a repeated call is recalled without
  the loader, ``kernelcache.lookup.recall``). Goals:
  ``kc import+load`` <= ``tvm load``; ``kc load`` <= 0.5x ``tvm load``.

Prints medians and minimums over N fresh processes (sides interleaved), the garbage collections
each case's timed part set off (generations 0/1/2, summed over the runs: a full collection over
torch's objects costs tens of milliseconds) and the ratios. Not a test.

    python benchmarks/bench_dropin_import.py [--reps 15]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_KW = "cpp_sources='int64_t add(int64_t a, int64_t b) { return a + b; }', functions=['add']"
_KC_PRE = ("import kernelcache.tvm_ffi, kernelcache.tvm_ffi._args, kernelcache.tvm_ffi._sources, "
           "kernelcache.inline_sources, kernelcache.base.spec, kernelcache.lookup.loader, kernelcache.lookup.admit")
# case: (untimed setup, timed code)
CASES = {
    "baseline": ("", "import tvm_ffi.cpp"),
    "route": ("", "import kernelcache.tvm_ffi, kernelcache.patch; kernelcache.patch.arm('tvm_ffi')"),
    # what a warm load_inline imports on top: the drop-in's helpers (imported by the first call
    # since issue 16's import-cost pass) and the loader
    "first call": ("", "import kernelcache.tvm_ffi, kernelcache.patch; kernelcache.patch.arm('tvm_ffi'); " + _KC_PRE),
    "tvm load": ("import tvm_ffi.cpp", f"m = tvm_ffi.cpp.load_inline('bench_imp', {_KW}); assert m.add(1, 2) == 3"),
    "tvm import+load": ("", f"import tvm_ffi.cpp; m = tvm_ffi.cpp.load_inline('bench_imp', {_KW}); "
                            "assert m.add(1, 2) == 3"),
    "kc import+load": ("", f"import kernelcache.tvm_ffi as j; m = j.load_inline('bench_imp', {_KW}); "
                           "assert m.add(1, 2) == 3"),
    "kc load": ("import kernelcache.tvm_ffi", f"m = kernelcache.tvm_ffi.load_inline('bench_imp', {_KW}); "
                                            "assert m.add(1, 2) == 3"),
}
TIMED = """
import gc, json, sys, time
import tvm_ffi
exec(sys.argv[1])
n = [0, 0, 0]
def _count(phase, info):
    if phase == "start":
        n[info["generation"]] += 1
gc.callbacks.append(_count)
t0 = time.perf_counter()
exec(sys.argv[2])
dt = (time.perf_counter() - t0) * 1e3
gc.callbacks.remove(_count)
print(json.dumps([dt, n]))
"""


def _venv(work: Path) -> str:
    wheels = work / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(REPO)], check=True, capture_output=True)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--ignore-installed",
                    *map(str, wheels.glob("*.whl"))], check=True, capture_output=True)
    site = subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    Path(site, "zz_bench_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([py, "-m", "compileall", "-q", site], check=True, capture_output=True)
    return py


def bench(reps: int) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="kc-bench-import-") as tmp:
        work = Path(tmp)
        py = _venv(work)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "PYTHONPATH"))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(KERNELCACHE_DIR=str(work / "kc"), KERNELCACHE_LOCK_DIR=str(work / "locks"), KERNELCACHE_LOG="0",
                   TVM_FFI_CACHE_DIR=str(work / "tvm"))
        samples: dict[str, list[list]] = {c: [] for c in CASES}
        for i in range(reps + 1):
            order = list(CASES) if i % 2 == 0 else list(reversed(CASES))
            for case in order:
                pre, code = CASES[case]
                out = subprocess.run([py, "-c", TIMED, pre, code], env=env, cwd=tmp, capture_output=True, text=True)
                if out.returncode != 0:
                    raise RuntimeError(f"{case} failed:\n{out.stdout}\n{out.stderr}")
                if i:  # the first round builds both kernels, warms the page cache and bytecode: not measured
                    samples[case].append(json.loads(out.stdout.strip().splitlines()[-1]))
        return {c: {"median_ms": round(statistics.median(x[0] for x in v), 2), "min_ms": round(min(x[0] for x in v), 2),
                    "gc": [sum(x[1][g] for x in v) for g in range(3)]}
                for c, v in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rows = bench(args.reps)
    print(f"{'on top of import tvm_ffi':<26} {'median':>9} {'min':>9}   gc collections gen0/1/2 (all runs)")
    for case, r in rows.items():
        print(f"{case:<26} {r['median_ms']:>6.2f} ms {r['min_ms']:>6.2f} ms   {r['gc']}")
    print(f"route vs goal 3 ms: median {rows['route']['median_ms']:.2f} ms; "
          f"first call (with the loader) median {rows['first call']['median_ms']:.2f} ms")
    t = rows["tvm load"]["median_ms"]
    print(f"kc import+load / tvm load: {rows['kc import+load']['median_ms'] / t:.2f}x (goal <= 1x); "
          f"kc load / tvm load: {rows['kc load']['median_ms'] / t:.2f}x (goal <= 0.5x); "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
