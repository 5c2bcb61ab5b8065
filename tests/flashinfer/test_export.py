"""``kernelcache build --flashinfer``: a deployment's FlashInfer modules into an artifact root.

The session's module is exported (a hit: nothing compiles), a host without compilers loads it
from the root, and a root written by another FlashInfer (another version, or another build of
the same version: other header bytes) is refused with one line naming both versions, never
loaded and never a crash.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import REPO, FiEnv

SILU = 'flashinfer.jit.activation:gen_act_and_mul_module("silu")'
HEADER = "flashinfer/data/include/flashinfer/activation.cuh"  # a FlashInfer header silu reads
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
    assert HEADER in m["prebuilt"]["flashinfer_headers"]  # with its sha256, as RECORD states it


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


def _another_build(fi: FiEnv, header: str) -> Path:
    """FlashInfer of the same version as installed, built with ``header`` changed: a site dir of
    symlinks to the installed files, real directories down to that header's changed copy, and
    the dist-info copied with its RECORD stating the new sha256 (what a rebuilt wheel installs)."""
    import base64
    import hashlib

    import flashinfer

    src_site = Path(flashinfer.__file__).parent.parent
    site = fi.tmp / "fi-site-another-build"
    parts = Path(header).parts
    src, dst = src_site / parts[0], site / parts[0]
    dst.mkdir(parents=True)
    for part in parts[1:]:
        for child in src.iterdir():
            if child.name != part:
                (dst / child.name).symlink_to(child)
        src, dst = src / part, dst / part
        if part != parts[-1]:
            dst.mkdir()
    data = src.read_bytes() + b"\n// another build of the same version\n"
    dst.write_bytes(data)
    sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    (info,) = src_site.glob(f"flashinfer_python-{flashinfer.__version__}.dist-info")
    shutil.copytree(info, site / info.name)
    lines = (site / info.name / "RECORD").read_text().splitlines()
    lines = [f"{header},sha256={sha},{len(data)}" if ln.startswith(header + ",") else ln for ln in lines]
    (site / info.name / "RECORD").write_text("\n".join(lines) + "\n")
    return site


def test_a_root_from_another_build_of_the_same_flashinfer_version_is_refused(fi: FiEnv, root: Path) -> None:
    import flashinfer

    site = _another_build(fi, HEADER)
    env = _bare_host(fi, "host-another-build", root)
    env["PYTHONPATH"] = f"{site}:{fi.env(fi.tmp)['PYTHONPATH']}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = fi.links()
    p = fi.run(fi.tmp / "host-another-build" / "ws", check=False, **env)
    assert p.returncode == 1 and fi.links() == before, p.stdout[-2000:]
    v = flashinfer.__version__
    assert f"built with FlashInfer {v}, installed FlashInfer is {v}, another build: its header {HEADER} differs" \
        in p.stderr, p.stderr[-3000:]


def test_a_name_that_is_not_a_module_function_fails_with_a_clear_line(fi: FiEnv) -> None:
    bad = ["build", "--flashinfer", "flashinfer.jit.activation:gen_act_and_mul_module(__import__('os'))",
           "--flashinfer", "flashinfer.jit.activation:no_such_function", "--out", str(fi.tmp / "fi-root-bad")]
    p = fi.run(fi.tmp / "ws-a", code=BUILD.format(argv=bad), check=False)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "arguments must be literals" in p.stdout and "has no function 'no_such_function'" in p.stdout, p.stdout


def test_a_companion_wheel_of_the_root_serves_a_host_without_compilers(fi: FiEnv, root: Path) -> None:
    import zipfile

    from kernelcache.export.roots import pack_wheel

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


def test_the_console_script_finds_a_generator_in_the_working_directory(fi: FiEnv, tmp_path: Path) -> None:
    """Issue 46: ``kernelcache build --flashinfer app_ops:silu`` at a project's root could not import
    ``app_ops`` (the console script's sys.path starts at its own directory, not the cwd)."""
    import subprocess
    import sys

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "app_ops.py").write_text("from flashinfer.jit.activation import gen_act_and_mul_module\n\n\n"
                                     "def silu():\n    return gen_act_and_mul_module('silu')\n")
    script = Path(sys.executable).parent / "kernelcache"
    before = fi.links()
    p = subprocess.run([str(script), "build", "--flashinfer", "app_ops:silu", "--out", str(tmp_path / "root")],
                       cwd=proj, env={**fi.env(fi.tmp / "ws-a"), "PYTHONPATH": str(REPO)},  # no '' entry: not the cwd
                       capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and "silu_and_mul" in p.stdout and "hit" in p.stdout, p.stdout + p.stderr[-2000:]
    assert fi.links() == before  # the session's entry, exported
