"""Kernel lock benchmark (issue 39): ``warm --lock`` of the example set vs loading the same set
unlocked, fresh processes; and the sizes of what ships (lock, root, wheel, OCI image layout).

The example set is the end-to-end test's CPU service (tests/lockfile/test_end_to_end.py): a user
tvm-ffi kernel, a torch extension through ``KERNELCACHE_PATCH=torch`` (pybind11 only) and the
shipped n-gram corpus, recorded into a lock by running the app once (not timed), then built into
a root with ``build --lock`` and packed. FlashInfer's module is left out: on a host without a GPU
it needs nvcc to spell its own flags (``--flashinfer`` adds it where that works).

Timed, alternating sides, N repetitions of fresh interpreters, medians:
* ``locked``: ``kernelcache.lockfile.preload(LOCK)`` (what ``kernelcache warm --lock LOCK`` runs):
  the lock read, then ``kc.warm`` under it: each kernel served without building and the served
  entry compared with its block (source key, header digests; the full re-hash only on a mismatch);
* ``unlocked``: ``kc.warm`` of the same KernelSpecs with no lock set; they are rebuilt from the lock
  file inside the timed part too (an unlocked app builds them in its own code: the same imports,
  ``kernelcache.kernels`` for the shipped one), so the difference is the lock's own checks.
In-process time of that call (after ``import tvm_ffi``, which imports torch: ~5 s here, the same
for both sides, and the noise that would hide the lock's own cost) and the whole process, from the
local cache (``cache``) and from the read-only root with an empty cache per process (``root``, a
node). Goal: locked <= 1.05x unlocked. Also the CLI ``kernelcache warm --lock`` process, once.

    python benchmarks/bench_lockfile.py [--reps 9] [--flashinfer] [--json]
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

KERNEL_SRC = """#include <tvm/ffi/function.h>
#include "kc_add.h"
int64_t add(int64_t a, int64_t b) { return a + b + KC_OFFSET; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""
EXT_SRC = """#include <pybind11/pybind11.h>
namespace py = pybind11;
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("window", [] { return 4; }); }
"""
APP = """
import os
from pathlib import Path
import kernelcache as kc
here = Path(__file__).resolve().parent
kc.load(kc.KernelSpec(name="adder", sources=["add.cc"], root=here / "proj", include_dirs=["include"],
                      functions={"add": "Callable[[int, int], int]"}))
from torch.utils.cpp_extension import load
load(name="kc_bench_ext", sources=[str(here / "ext" / "ext.cpp")])
from kernelcache.kernels import NgramCorpus
NgramCorpus(max_trie_depth=4, draft_token_num=3, capacity=100)
if os.environ.get("APP_FLASHINFER"):
    from flashinfer.jit import activation
    activation.gen_act_and_mul_module("silu").build_and_load()
"""
SIDE = """
import json, sys, time
t0 = time.perf_counter()
import kernelcache as kc
from kernelcache.lockfile.serve import locked_specs
import tvm_ffi  # noqa: F401 - both sides need it (and the torch it imports): seconds here, not timed
side, lock = sys.argv[1], sys.argv[2]
t1 = time.perf_counter()
if side == "locked":
    from kernelcache import lockfile
    t2 = time.perf_counter()
    results = lockfile.preload(lock)
else:
    t2 = time.perf_counter()
    results = kc.warm(locked_specs(lock, kc.Settings.from_env()))
t3 = time.perf_counter()
assert all(r.error is None for r in results), [str(r.error) for r in results]
print(json.dumps({"call": t3 - t2, "import": t1 - t0, "n": len(results), "builds": kc.stats()["builds"]}))
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise SystemExit(f"{argv} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _setup(tmp: Path, flashinfer: bool) -> dict[str, Path]:
    app = tmp / "app"
    (app / "proj" / "include").mkdir(parents=True)
    (app / "proj" / "add.cc").write_text(KERNEL_SRC)
    (app / "proj" / "include" / "kc_add.h").write_text("#define KC_OFFSET 0\n")
    (app / "ext").mkdir()
    (app / "ext" / "ext.cpp").write_text(EXT_SRC)
    (app / "app.py").write_text(APP)
    (tmp / "side.py").write_text(SIDE)
    paths = {"app": app, "lock": app / "kernels.lock", "cache": tmp / "cache", "root": tmp / "root",
             "dist": tmp / "dist", "oci": tmp / "oci"}
    env = _env(paths["cache"], KERNELCACHE_PATCH="torch,flashinfer" if flashinfer else "torch")
    if flashinfer:
        stub = tmp / "stub"
        stub.mkdir()
        (stub / "empty.c").write_text("int kc_libcuda_stub;\n")
        _run(["gcc", "-shared", "-o", str(stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1", str(stub / "empty.c")],
             env, tmp)
        env.update(APP_FLASHINFER="1", CUDA_HOME="/usr/local/cuda", FLASHINFER_CUDA_ARCH_LIST="9.0a",
                   FLASHINFER_WORKSPACE_BASE=str(tmp / "ws"), FLASHINFER_EXTRA_LDFLAGS=f"-L{stub}")
    t0 = time.monotonic()
    _run([sys.executable, str(app / "app.py")], {**env, "KERNELCACHE_LOCK_RECORD": str(paths["lock"])}, app)
    print(f"recorded the example set in {time.monotonic() - t0:.1f} s (builds included)", file=sys.stderr)
    kc = [sys.executable, "-m", "kernelcache"]
    _run([*kc, "build", "--lock", str(paths["lock"]), "--arch", "9.0", "--out", str(paths["root"])], env, app)
    _run([*kc, "pack", str(paths["root"]), "--tag", "bench", "--out", str(paths["dist"])], env, app)
    _run([*kc, "pack", "--oci", str(paths["oci"]), str(paths["root"]), "--tag", "bench"], env, app)
    subprocess.run(["chmod", "-R", "a-w", str(paths["root"])], check=True)
    return paths


def _env(cache: Path, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_"))}
    e.update(KERNELCACHE_DIR=str(cache), KERNELCACHE_LOG="0", KERNELCACHE_CUDA_ARCH="9.0",
             TORCH_EXTENSIONS_DIR=str(cache.parent / "torch_extensions"))
    e.update(extra)
    return e


def _one(side: str, where: str, paths: dict[str, Path], tmp: Path, i: int) -> dict:
    if where == "cache":
        env = _env(paths["cache"])
    else:  # a node: an empty cache per process, the read-only root, no building
        env = _env(tmp / f"node-{side}-{i}", KERNELCACHE_PREBUILT=str(paths["root"]), KERNELCACHE_NO_BUILD="1")
    if side == "locked":
        env["KERNELCACHE_LOCK"] = str(paths["lock"])
    t0 = time.perf_counter()
    p = _run([sys.executable, str(tmp / "side.py"), side, str(paths["lock"])], env, paths["app"])
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process"] = time.perf_counter() - t0
    if out["builds"]:
        raise SystemExit(f"{side}/{where}: {out['builds']} build(s) in a timed run")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--flashinfer", action="store_true", help="add FlashInfer's silu_and_mul (needs nvcc)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-lock-"))
    try:
        paths = _setup(tmp, args.flashinfer)
        rows: dict[str, dict] = {}
        for where in ("cache", "root"):
            got: dict[str, list[dict]] = {"locked": [], "unlocked": []}
            for i in range(args.reps):
                for side in (("locked", "unlocked") if i % 2 == 0 else ("unlocked", "locked")):
                    got[side].append(_one(side, where, paths, tmp, i))
            med = {side: {k: statistics.median(r[k] for r in runs) for k in ("call", "process")}
                   for side, runs in got.items()}
            rows[where] = {"n_kernels": got["locked"][0]["n"], **med,
                           "ratio_call": med["locked"]["call"] / med["unlocked"]["call"],
                           "ratio_process": med["locked"]["process"] / med["unlocked"]["process"]}
        t0 = time.perf_counter()
        _run([sys.executable, "-m", "kernelcache", "warm", "--lock", str(paths["lock"])],
             _env(tmp / "cli-node", KERNELCACHE_PREBUILT=str(paths["root"]), KERNELCACHE_NO_BUILD="1"), paths["app"])
        cli = time.perf_counter() - t0
        wheel = next(paths["dist"].glob("*.whl"))
        sizes = {"lock": _size(paths["lock"]), "root": _size(paths["root"]), "wheel": _size(wheel),
                 "oci": _size(paths["oci"])}
        report = {"reps": args.reps, "rows": rows, "cli_warm_lock_s": cli, "sizes_bytes": sizes}
        if args.json:
            print(json.dumps(report, indent=1))
            return 0
        print(f"example set: {rows['cache']['n_kernels']} kernels; {args.reps} fresh processes per side, medians")
        print(f"{'where':<6} {'locked call':>12} {'unlocked call':>14} {'ratio':>6} {'locked proc':>12} "
              f"{'unlocked proc':>14} {'ratio':>6}")
        for where, r in rows.items():
            print(f"{where:<6} {r['locked']['call'] * 1e3:>10.1f}ms {r['unlocked']['call'] * 1e3:>12.1f}ms "
                  f"{r['ratio_call']:>5.2f}x {r['locked']['process'] * 1e3:>10.1f}ms "
                  f"{r['unlocked']['process'] * 1e3:>12.1f}ms {r['ratio_process']:>5.2f}x")
        print(f"kernelcache warm --lock (CLI, one process, from the root): {cli * 1e3:.0f} ms")
        print("sizes: " + ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sizes.items()))
        return 0
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(tmp)], check=False)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
