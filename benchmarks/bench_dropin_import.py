"""Import cost of routing tvm-ffi through the drop-in, from an installed wheel, cached bytecode.

Builds a wheel of this tree, installs it into a temporary venv (``--system-site-packages``; the
running interpreter's packages, tvm_ffi and torch included, on its path), compiles its bytecode,
then starts fresh interpreters. In each, ``import tvm_ffi`` runs first (not timed: both sides pay
it; it imports torch when torch is installed), then the clock covers:

* ``baseline``: ``import tvm_ffi.cpp`` (what a tvm-ffi user pays for the JIT module itself);
* ``route``: ``import kernelcache.tvm_ffi`` + the hook armed by ``KERNELCACHE_PATCH`` (what a
  process routing tvm-ffi through the drop-in pays before its first call);
* ``first call``: ``route`` + the loader modules a warm load imports (``kernelcache.load``).

Prints medians and minimums over N fresh processes, and the added milliseconds vs the goal
(3 ms). Not a test.

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
CASES = {
    "baseline": "import tvm_ffi.cpp",
    "route": "import kernelcache.tvm_ffi, kernelcache.patch; kernelcache.patch.arm('tvm_ffi')",
    "first call": ("import kernelcache.tvm_ffi, kernelcache.patch; kernelcache.patch.arm('tvm_ffi'); "
                   "import kernelcache.loader, kernelcache.admit"),
}
TIMED = """
import json, sys, time
import tvm_ffi
t0 = time.perf_counter()
exec(sys.argv[1])
print(json.dumps((time.perf_counter() - t0) * 1e3))
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


def bench(reps: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="kc-bench-import-") as tmp:
        work = Path(tmp)
        py = _venv(work)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "PYTHONPATH"))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        samples: dict[str, list[float]] = {c: [] for c in CASES}
        for i in range(reps + 1):
            for case, code in CASES.items():
                out = subprocess.run([py, "-c", TIMED, code], env=env, cwd=tmp, capture_output=True, text=True,
                                     check=True)
                if i:  # the first round warms the OS page cache and the bytecode, not measured
                    samples[case].append(json.loads(out.stdout.strip().splitlines()[-1]))
        return {c: {"median_ms": round(statistics.median(v), 2), "min_ms": round(min(v), 2)}
                for c, v in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rows = bench(args.reps)
    print(f"{'on top of import tvm_ffi':<26} {'median':>9} {'min':>9}")
    for case, r in rows.items():
        print(f"{case:<26} {r['median_ms']:>6.2f} ms {r['min_ms']:>6.2f} ms")
    print(f"route vs goal 3 ms: median {rows['route']['median_ms']:.2f} ms; "
          f"first call (with the loader) median {rows['first call']['median_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
