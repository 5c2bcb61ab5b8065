"""A CUDA arch that is set but cannot be parsed is a usage error (exit 2), never a silent skip."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("var", ["KERNELCACHE_CUDA_ARCH", "TVM_FFI_CUDA_ARCH_LIST"])
def test_warm_with_a_bad_arch_is_a_usage_error(cli, var):
    r = cli.run("warm", **{var: "banana"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "banana" in r.stderr and var in r.stderr
    assert "skipped" not in r.stdout
    assert not (cli.cache / "v1" / "entries").exists()  # nothing was built before the check


def test_explain_with_a_bad_arch_is_a_usage_error(cli):
    r = cli.run("explain", "tree_speculative_sampling", KERNELCACHE_CUDA_ARCH="9.0,banana")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "banana" in r.stderr


def test_build_with_a_bad_arch_flag_is_a_usage_error(cli):
    r = cli.run("build", "--arch", "banana", "--out", str(cli.tmp / "out"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "banana" in r.stderr and "--arch" in r.stderr
