"""Per-kernel commands resolve names from the cache's own records (user and drop-in kernels, as
``ls``/``stats`` list them) and from ``--spec MOD:FUNC``, not only the shipped kernels."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SRC = """\
#include <tvm/ffi/function.h>
#include "kc_off.h"
int64_t add(int64_t a, int64_t b) { return a + b + KC_OFF; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""

SPECS = """\
from pathlib import Path
import kernelcache as kc

def specs():
    return [kc.KernelSpec(name="uadd", sources=["src/add.cc"], root=Path(__file__).parent,
                          include_dirs=["include"], cflags=["-DKC_FLAG=1"], functions=["add"])]
"""

DROPIN = """
from kernelcache.tvm_ffi import load_inline
m = load_inline("kc_inline_add", cpp_sources="int64_t add_one(int64_t x) { return x + 1; }",
                functions=["add_one"])
assert m.add_one(1) == 2
"""


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """One cache for this module: its kernels are built once (tests only read, or restore)."""
    from .conftest import make_cli

    return make_cli(tmp_path_factory.mktemp("cli-names"))


@pytest.fixture(scope="module")
def built(cli):
    """A user kernel (include dir, cflags, learned schema) and a drop-in kernel, built once each."""
    proj = cli.tmp / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "include").mkdir()
    (proj / "src" / "add.cc").write_text(SRC)
    (proj / "include" / "kc_off.h").write_text("#define KC_OFF 0\n")
    (proj / "kcspecs.py").write_text(SPECS)
    code = "import kernelcache as kc, kcspecs\nassert kc.load(kcspecs.specs()[0]).add(1, 2) == 3\n" + DROPIN
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=proj, env=cli.env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return proj


def _explain(cli, name, *extra, cwd=None):
    r = cli.run("explain", name, "--json", *extra, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _entry_key(cli, name):
    [m] = [json.loads(p.read_text()) for p in (cli.cache / "v1" / "entries" / name).glob("*/*/manifest.json")]
    return m["key1"]


def test_explain_resolves_user_and_dropin_kernels_from_records(cli, built):
    for name in ("uadd", "kc_inline_add"):
        info = _explain(cli, name, cwd=cli.tmp)  # not the project dir: only the records know it
        assert info["status"] == "hit", info
        assert info["key1"] == _entry_key(cli, name)
    header = built / "include" / "kc_off.h"
    try:
        header.write_text("#define KC_OFF 1\n")
        info = _explain(cli, "uadd", cwd=cli.tmp)
        assert info["status"] == "miss" and "kc_off.h" in info["refused"][0] and "changed" in info["reason"]
    finally:
        header.write_text("#define KC_OFF 0\n")


def test_explain_with_spec_mod_func(cli, built):
    info = _explain(cli, "uadd", "--spec", "kcspecs:specs", cwd=built)
    assert info["status"] == "hit" and info["key1"] == _entry_key(cli, "uadd")


def test_warm_and_verify_take_a_recorded_name(cli, built):
    r = cli.run("warm", "uadd", "--json")
    assert r.returncode == 0, r.stderr
    [res] = json.loads(r.stdout)
    assert res["status"] == "hit"
    r = cli.run("verify", "kc_inline_add")
    assert r.returncode == 0 and "0 bad entries" in r.stdout


def test_unknown_name_lists_recorded_kernels(cli, built):
    r = cli.run("explain", "nope")
    assert r.returncode == 2
    assert "unknown kernel 'nope'" in r.stderr and "uadd" in r.stderr and "kc_inline_add" in r.stderr
