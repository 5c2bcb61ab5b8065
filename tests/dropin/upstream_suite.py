"""Run tvm-ffi's own JIT tests (test_load_inline.py, test_build_inline.py, test_build.py of the
release in ci/constraints.txt) through the drop-in, from outside, in each mode.

They are never copied into this repository: fetch them from apache/tvm-ffi into a directory
(with test_build.cc and the header it includes) and point this script at it::

    python tests/dropin/upstream_suite.py /tmp/tvmffi-tests [--mode swap|patch|env|runner|all]

Modes: ``swap`` (``tvm_ffi.cpp`` is ``kernelcache.tvm_ffi``: the one-import-line migration),
``patch`` (``pytest -p kernelcache --kc-patch=tvm_ffi``), ``env`` (``KERNELCACHE_PATCH=tvm_ffi``
in a process that never imports kernelcache itself: the ``.pth`` hook, else a usage error),
``runner`` (``python -m kernelcache.patch -m pytest``). Each mode gets fresh caches; a mode
passes when pytest passes with only the deselected tests below left out and tvm-ffi's own cache
directory was never created (every build went through kernelcache). Exit status: 0 when all
modes pass.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = ("test_load_inline.py", "test_build_inline.py", "test_build.py")
# Tests that assert tvm-ffi's default flags, which the drop-in changes on purpose (docs/tvm_ffi_dropin.md).
DESELECT = ("test_build.py::test_build_without_metadata",)
MODES = ("swap", "patch", "env", "runner")

SWAP_PLUGIN = '''"""The import swap, as a pytest plugin: ``tvm_ffi.cpp`` *is* ``kernelcache.tvm_ffi``."""
import sys

import tvm_ffi
import tvm_ffi.cpp.extension  # the real builders stay importable (object outputs use them)
import kernelcache.tvm_ffi as dropin

sys.modules["tvm_ffi.cpp"] = dropin
tvm_ffi.cpp = dropin
'''


HAS_PTH = ("import os, site, sys; dirs = site.getsitepackages() + [site.getusersitepackages()]; "
           "sys.exit(0 if any(os.path.exists(os.path.join(d, 'kernelcache-patch.pth')) for d in dirs) else 1)")


def has_pth_hook(python: str) -> bool:
    """Does ``python`` process kernelcache's ``.pth`` hook at start-up (mode ``env`` needs it)?"""
    return subprocess.run([python, "-c", HAS_PTH], capture_output=True).returncode == 0


def _command(mode: str, tests: Path, plugdir: Path, python: str = sys.executable
             ) -> tuple[list[str], dict[str, str]]:
    base = [*(str(tests / f) for f in FILES), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
            "-k", " and ".join(f"not {d.split('::')[-1]}" for d in DESELECT)]
    env: dict[str, str] = {}
    if mode == "swap":
        (plugdir / "kc_swap_plugin.py").write_text(SWAP_PLUGIN)
        env["PYTHONPATH"] = str(plugdir)
        return [python, "-m", "pytest", "-p", "kc_swap_plugin", *base], env
    if mode == "patch":
        return [python, "-m", "pytest", "-p", "kernelcache", "--kc-patch=tvm_ffi", *base], env
    if mode == "env":
        env["KERNELCACHE_PATCH"] = "tvm_ffi"
        return [python, "-m", "pytest", *base], env
    return [python, "-m", "kernelcache.patch", "--jit", "tvm_ffi", "-m", "pytest", *base], env


def run_mode(mode: str, tests: Path, work: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    """One mode in fresh caches under ``work``; the process result (its stdout holds pytest's)."""
    (work / "cwd").mkdir(parents=True, exist_ok=True)  # test_load_inline_cpp_build_dir writes ./build/
    argv, extra = _command(mode, tests, work, python)
    env = dict(os.environ)
    env.update({"KERNELCACHE_DIR": str(work / "kc-cache"), "KERNELCACHE_LOCK_DIR": str(work / "locks"),
                "TVM_FFI_CACHE_DIR": str(work / "tvm-ffi-cache"), "KERNELCACHE_LOG": "0"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra.pop("PYTHONPATH", ""), str(REPO),
                                                     env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    for name in ("KERNELCACHE_PATCH", "KERNELCACHE_PATCH_TVM_FFI"):
        if name not in extra:
            env.pop(name, None)
    return subprocess.run(argv, env=env, cwd=str(work / "cwd"), capture_output=True, text=True, timeout=1800)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", type=Path, help="directory holding " + ", ".join(FILES))
    ap.add_argument("--mode", choices=(*MODES, "all"), default="all")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter to run pytest with (mode env needs one whose install has the .pth hook)")
    args = ap.parse_args(argv)
    missing = [f for f in FILES if not (args.tests / f).is_file()]
    if missing:
        ap.error(f"{args.tests}: missing {', '.join(missing)}")
    failed = []
    with tempfile.TemporaryDirectory(prefix="kc-upstream-") as tmp:
        for mode in (MODES if args.mode == "all" else (args.mode,)):
            if mode == "env" and not has_pth_hook(args.python):
                print(f"{mode:7s} SKIP  {args.python} has no kernelcache-patch.pth (install the package with "
                      "pip, or pass --python of an environment that has it; docs/tvm_ffi_dropin.md)")
                if args.mode == "env":
                    failed.append(mode)
                continue
            proc = run_mode(mode, args.tests.resolve(), Path(tmp) / mode, args.python)
            tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            untouched = not (Path(tmp) / mode / "tvm-ffi-cache").exists()
            ok = proc.returncode == 0 and untouched
            print(f"{mode:7s} {'PASS' if ok else 'FAIL'}  {tail}"
                  + ("" if untouched else "  (tvm-ffi's own cache was used)"))
            if not ok:
                failed.append(mode)
                print(proc.stdout[-6000:] + proc.stderr[-3000:])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
