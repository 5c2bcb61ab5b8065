"""``kernelcache build --flashinfer``: a deployment's FlashInfer modules into an artifact root.

The session's module is exported (a hit: nothing compiles), a host without compilers loads it
from the root, and a root written by another FlashInfer is refused with one line naming both
versions, never loaded and never a crash.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import FiEnv

SILU = 'flashinfer.jit.activation:gen_act_and_mul_module("silu")'
BUILD = "import sys; from kernelcache.cli import main; raise SystemExit(main({argv!r}))"


@pytest.fixture(scope="module")
def root(fi: FiEnv) -> Path:
    """The session's module exported by ``kernelcache build --flashinfer`` (a hit)."""
    out = fi.tmp / "fi-root"
    before = fi.links()
    p = fi.run(fi.tmp / "ws-a", code=BUILD.format(argv=["build", "--flashinfer", SILU, "--out", str(out)]))
    assert fi.links() == before, p.stdout  # the session's entry: exported, not rebuilt
    assert "silu_and_mul" in p.stdout and "hit" in p.stdout, p.stdout
    return out


def _manifest(root: Path) -> Path:
    (found,) = root.glob("v1/entries/silu_and_mul/*/*/manifest.json")
    return found


def _bare_host(fi: FiEnv, name: str, root: Path) -> dict[str, str]:
    """A host with no nvcc, no C++ compiler, an empty cache and ``root`` configured."""
    host = fi.tmp / name
    path = ":".join(d for d in fi.env(host)["PATH"].split(":") if "cuda" not in d)
    return {"KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_LOCK_DIR": str(host / "locks"),
            "KERNELCACHE_PREBUILT": str(root), "CXX": str(host / "no-such-compiler"), "PATH": path,
            "FLASHINFER_DISABLE_JIT": "1"}


def test_the_exported_entry_is_labelled_with_the_flashinfer_version(fi: FiEnv, root: Path) -> None:
    import flashinfer.version

    m = json.loads(_manifest(root).read_text())
    assert m["prebuilt"]["flashinfer_version"] == flashinfer.version.__version__
    assert m["kind"] == "flashinfer" and m["prebuilt"]["cuda_major"]


def test_a_host_without_compilers_loads_the_module_from_the_root(fi: FiEnv, root: Path) -> None:
    before = fi.links()
    env = _bare_host(fi, "host-root", root)
    out = fi.probe(fi.tmp / "host-root" / "ws", **env)
    assert out["fn"] and out["compiled"] and fi.links() == before
    assert out["library"].startswith(str(root)), out  # the root's file, not FlashInfer's own


def test_a_root_from_another_flashinfer_is_refused_with_one_line(fi: FiEnv, root: Path) -> None:
    other = fi.tmp / "fi-root-other"
    shutil.copytree(root, other)
    mf = _manifest(other)
    m = json.loads(mf.read_text())
    m["prebuilt"]["flashinfer_version"] = "0.0.1"
    mf.write_text(json.dumps(m))
    before = fi.links()
    env = _bare_host(fi, "host-other", other)
    p = fi.run(fi.tmp / "host-other" / "ws", check=False, **env)
    assert p.returncode == 1 and fi.links() == before
    assert "MissingJITCacheError" in p.stderr or "FlashInferCacheMiss" in p.stderr, p.stderr[-3000:]
    assert "built with FlashInfer 0.0.1, installed FlashInfer is" in p.stderr, p.stderr[-3000:]
    assert "Segmentation" not in p.stderr


def test_a_name_that_is_not_a_module_function_fails_with_a_clear_line(fi: FiEnv) -> None:
    bad = ["build", "--flashinfer", "flashinfer.jit.activation:gen_act_and_mul_module(__import__('os'))",
           "--flashinfer", "flashinfer.jit.activation:no_such_function", "--out", str(fi.tmp / "fi-root-bad")]
    p = fi.run(fi.tmp / "ws-a", code=BUILD.format(argv=bad), check=False)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "arguments must be literals" in p.stdout and "has no function 'no_such_function'" in p.stdout, p.stdout


def test_a_companion_wheel_of_the_root_serves_a_host_without_compilers(fi: FiEnv, root: Path) -> None:
    import zipfile

    from kernelcache.export import pack_wheel

    whl = pack_wheel(root, fi.tmp / "fi-dist", "fi_test")
    site = fi.tmp / "fi-wheel-site"  # the wheel "installed": unpacked onto the host's path
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    env = _bare_host(fi, "host-wheel", root)
    del env["KERNELCACHE_PREBUILT"]
    env["PYTHONPATH"] = f"{fi.env(fi.tmp)['PYTHONPATH']}:{site}"
    before = fi.links()
    out = fi.probe(fi.tmp / "host-wheel" / "ws", **env)
    assert out["fn"] and fi.links() == before
    assert out["library"].startswith(str(site / "kernelcache_prebuilt_fi_test" / "root")), out
