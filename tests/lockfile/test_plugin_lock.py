"""Issue 39 (part A): the kernel lock in a pytest session (real pytest subprocesses, real xdist
workers). ``--kc-lock-record`` records what the tests load in both workers into one lock;
``--kc-lock`` fails a test loading a kernel the lock lacks (nothing compiled), and in warn mode
the test passes and the summary counts the compile after ready.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelcache import lockfile

SRC = """\
#include <tvm/ffi/function.h>
#include <cstdint>
int64_t {fn}(int64_t a, int64_t b) {{ return a {op} b; }}
TVM_FFI_DLL_EXPORT_TYPED_FUNC({fn}, {fn});
"""

TEST = """\
from pathlib import Path
import kernelcache as kc

HERE = Path(__file__).resolve().parent


def test_{name}():
    spec = kc.KernelSpec(name="kc_lock_{name}", sources=["kernels/{name}.cc"], root=HERE,
                         functions={{"{fn}": "Callable[[int, int], int]"}})
    assert kc.load(spec).{fn}(5, 3) == {want}
"""


@pytest.fixture
def proj(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for k in [k for k in os.environ if k.startswith(("KERNELCACHE_", "PYTEST_XDIST"))] + ["PYTEST_ADDOPTS"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KERNELCACHE_DIR", str(pytester.path / "kc-cache"))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(pytester.path / "kc-locks"))
    (pytester.path / "kernels").mkdir()
    for name, fn, op, want in (("a", "add", "+", 8), ("b", "sub", "-", 2), ("c", "mul", "*", 15)):
        (pytester.path / "kernels" / f"{name}.cc").write_text(SRC.format(fn=fn, op=op))
        (pytester.path / f"lock_{name}.py").write_text(TEST.format(name=name, fn=fn, want=want))
    return pytester


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest_subprocess("-p", "kernelcache", "-p", "no:randomly", *args, timeout=900)


def test_xdist_workers_record_into_one_lock_and_locked_runs_refuse_the_rest(proj):
    lock = Path(proj.path) / "kernels.lock"
    r = _run(proj, "-p", "xdist", "-n", "2", f"--kc-lock-record={lock}", "lock_a.py", "lock_b.py")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    got = lockfile.read(lock)
    assert sorted(got.kernels) == ["kc_lock_a", "kc_lock_b"]
    assert got.kernels["kc_lock_a"].root == "." and got.kernels["kc_lock_a"].inputs.keys() == {"kernels/a.cc"}

    r = _run(proj, f"--kc-lock={lock}", "lock_a.py", "lock_b.py", "lock_c.py")
    r.assert_outcomes(passed=2, failed=1)
    r.stdout.fnmatch_lines(["*LockViolation*kc_lock_c*refused by the kernel lock*"])
    assert not list((Path(proj.path) / "kc-cache" / "v1" / "entries").glob("kc_lock_c"))  # nothing compiled

    r = _run(proj, f"--kc-lock={lock}", "--kc-lock-mode=warn", "-s", "lock_c.py")  # -s: the warn line on stderr
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["totals:*builds 1*compiles after ready 1*"])
    assert "kc_lock_c: not in the kernel lock" in r.stderr.str() + r.stdout.str()
