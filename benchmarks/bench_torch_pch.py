"""``use_pch=True`` benchmark: cold builds of ``torch/extension.h`` inline extensions, with and without.

Each measurement is one fresh interpreter (``import torch`` and the JIT module before the clock,
the ``load_inline`` call timed) on an empty kernelcache dir / torch extensions dir:

* ``off``       drop-in, ``use_pch=False``: extension A cold.
* ``pch-first`` drop-in, ``use_pch=True``, no precompiled header yet: the header is built, then A.
* ``pch-next``  drop-in, ``use_pch=True`` in the cache ``pch-first`` left: extension B (other
                code, same flags) cold: the shared precompiled header is what it saves.
* ``torch-off`` / ``torch-pch-next``: plain torch, the same two builds (torch's own ``use_pch``;
                its header in torch's include dir is removed before and after).

Ratios are printed against ``off`` (and torch's against ``torch-off``). Not a test.

    python benchmarks/bench_torch_pch.py [--reps 1] [--skip-torch]
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
CODE = "at::Tensor {fn}(at::Tensor x, at::Tensor y) {{ return x.sin() + y.{op}(); }}"
TIMED = """
import json, sys, time
import torch
side, name, fn, op, pch = sys.argv[1:6]
if side == "torch":
    from torch.utils import cpp_extension as ce
else:
    from kernelcache import cpp_extension as ce
    import kernelcache
    kernelcache.load_with_result
src = "at::Tensor %s(at::Tensor x, at::Tensor y) { return x.sin() + y.%s(); }" % (fn, op)
t0 = time.perf_counter()
mod = ce.load_inline(name, src, functions=[fn], use_pch=pch == "1")
t1 = time.perf_counter()
x = torch.randn(3)
assert torch.allclose(getattr(mod, fn)(x, x), x.sin() + getattr(x, op)())
print("RESULT " + json.dumps({"s": t1 - t0}))
"""


def _timed(side: str, env: dict, name: str, fn: str, op: str, pch: bool) -> float:
    p = subprocess.run([sys.executable, "-c", TIMED, side, name, fn, op, "1" if pch else "0"], env=env,
                       capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])["s"]
    raise SystemExit(f"{side} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def _remove_torch_pch() -> None:
    import torch.utils.cpp_extension as tce

    tce.remove_extension_h_precompiler_headers()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--skip-torch", action="store_true")
    args = ap.parse_args()
    base = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), KERNELCACHE_LOG="0")
    base.pop("KERNELCACHE_PATCH", None)
    rows: dict[str, list[float]] = {k: [] for k in ("off", "pch-first", "pch-next", "torch-off", "torch-pch-next")}
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="kc-bench-pch-") as tmp:
            env = dict(base, KERNELCACHE_DIR=os.path.join(tmp, "off"), TORCH_EXTENSIONS_DIR=os.path.join(tmp, "t"))
            rows["off"].append(_timed("dropin", env, "bench_pch_a", "sin_cos", "cos", False))
            env = dict(base, KERNELCACHE_DIR=os.path.join(tmp, "pch"), TORCH_EXTENSIONS_DIR=os.path.join(tmp, "t"))
            rows["pch-first"].append(_timed("dropin", env, "bench_pch_a", "sin_cos", "cos", True))
            rows["pch-next"].append(_timed("dropin", env, "bench_pch_b", "sin_tan", "tan", True))
            _remove_torch_pch()  # the drop-in leaves torch's copy where torch's use_pch does
            if not args.skip_torch:
                shutil.rmtree(os.path.join(tmp, "t"), ignore_errors=True)
                env = dict(base, TORCH_EXTENSIONS_DIR=os.path.join(tmp, "t1"))
                rows["torch-off"].append(_timed("torch", env, "bench_pch_a", "sin_cos", "cos", False))
                env = dict(base, TORCH_EXTENSIONS_DIR=os.path.join(tmp, "t2"))
                _timed("torch", env, "bench_pch_a", "sin_cos", "cos", True)  # torch builds its header here
                rows["torch-pch-next"].append(_timed("torch", env, "bench_pch_b", "sin_tan", "tan", True))
                _remove_torch_pch()
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    print(f"{'build':16} {'median s':>9}  ratio")
    for k, v in med.items():
        ref = med["torch-off"] if k.startswith("torch") else med["off"]
        print(f"{k:16} {v:9.1f}  {v / ref:.2f}x of {'torch-off' if k.startswith('torch') else 'off'}")
    print(json.dumps({k: [round(x, 2) for x in v] for k, v in rows.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
