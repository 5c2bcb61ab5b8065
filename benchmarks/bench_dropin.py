"""Drop-in benchmark: warm ``kernelcache.tvm_ffi.load_inline`` vs warm ``tvm_ffi.cpp.load_inline``.

Same kernel, same arguments, each warm call in a fresh interpreter (tvm_ffi and the drop-in are
imported before the clock starts on both sides, so only the load itself is timed), alternating
the two sides, N repetitions; also the second call in the same process. Prints medians and the
drop-in/tvm-ffi ratio measured in this run. Not a test.

    python benchmarks/bench_dropin.py [--reps 7]

``bench_dropin(reps)`` returns the rows for ``benchmarks/bench_cache.py``.
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

HEADER = "#pragma once\n#include <cstdint>\n#define KC_BENCH_OFFSET 3\n"
SOURCE = """
#include <vector>
#include <numeric>
#include "kc_bench.h"
int64_t add(int64_t a, int64_t b) {
  std::vector<int64_t> v{a, b};
  return std::accumulate(v.begin(), v.end(), int64_t(0)) + KC_BENCH_OFFSET;
}
"""

TIMED = """
import json, sys, time
import tvm_ffi  # common to both sides (imports torch when installed): not timed
side, preload = sys.argv[1], sys.argv[2] == "preload"
if preload:  # each side's own modules imported before the clock: the call alone is timed
    import tvm_ffi.cpp
    import kernelcache.tvm_ffi  # an application imports its JIT module once, at start
    kernelcache.load, kernelcache.warm  # the loader is imported lazily on first use
kw = dict(cpp_sources={src!r}, functions=["add"], extra_include_paths=[{inc!r}])
t0 = time.perf_counter()
if side == "tvm_ffi":
    import tvm_ffi.cpp as jit
else:
    from kernelcache import tvm_ffi as jit
mod = jit.load_inline("bench_dropin", **kw)
t1 = time.perf_counter()
jit.load_inline("bench_dropin", **kw)
t2 = time.perf_counter()
assert mod.add(1, 2) == 6
print(json.dumps({{"first": t1 - t0, "again": t2 - t1}}))
"""


def _run(side: str, code: str, env: dict, preload: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, side, "preload" if preload else "cold-import"], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_dropin(reps: int = 7) -> list[dict]:
    """Rows: {"case", "tvm_ffi_ms", "kernelcache_ms", "ratio"} (ratio = kernelcache / tvm_ffi)."""
    work = Path(tempfile.mkdtemp(prefix="kc-bench-dropin-"))
    try:
        inc = work / "include"
        inc.mkdir()
        (inc / "kc_bench.h").write_text(HEADER)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
        env.update(KERNELCACHE_DIR=str(work / "kc"), KERNELCACHE_LOCK_DIR=str(work / "locks"),
                   KERNELCACHE_LOG="0", TVM_FFI_CACHE_DIR=str(work / "tvm"),
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   # bytecode cached as in any installed environment (both sides alike)
                   PYTHONPYCACHEPREFIX=str(work / "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        code = TIMED.format(src=SOURCE, inc=str(inc))
        for side in ("tvm_ffi", "kernelcache"):  # cold builds (and bytecode), not measured
            _run(side, code, env, False)
        samples: dict[tuple[str, bool], list[dict]] = {}
        for _ in range(reps):
            for preload in (True, False):
                for side in ("tvm_ffi", "kernelcache"):
                    samples.setdefault((side, preload), []).append(_run(side, code, env, preload))
        rows = []
        for case, preload, label in (("first", True, "warm load, fresh process"),
                                     ("first", False, "import + warm load, fresh"),
                                     ("again", True, "repeat call, same process")):
            t = statistics.median(s[case] for s in samples[("tvm_ffi", preload)]) * 1e3
            k = statistics.median(s[case] for s in samples[("kernelcache", preload)]) * 1e3
            rows.append({"case": label, "tvm_ffi_ms": round(t, 2), "kernelcache_ms": round(k, 2),
                         "ratio": round(k / t, 3)})
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    rows = bench_dropin(args.reps)
    print(f"{'case':<28} {'tvm_ffi.cpp.load_inline':>24} {'kernelcache.tvm_ffi':>20} {'ratio':>7}")
    for r in rows:
        print(f"{r['case']:<28} {r['tvm_ffi_ms']:>21.2f} ms {r['kernelcache_ms']:>17.2f} ms {r['ratio']:>6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
