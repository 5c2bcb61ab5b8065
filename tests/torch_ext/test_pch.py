"""``load_inline(..., use_pch=True)``: one precompiled ``torch/extension.h`` in the cache, shared by
extensions with the same flags, keyed by what it was built from and checked before each use.

Before: ``use_pch`` was accepted and ignored (torch's ``test_gen_extension_h_pch`` failed through
the drop-in). Precompiling torch/extension.h costs about one translation unit of it (~40 s here),
so the module builds it once (a module fixture) and every test reads that one cache.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ..support import WRAPPER

pytest.importorskip("torch")

SRC = "at::Tensor {fn}(at::Tensor x, at::Tensor y) {{ return x.sin() + y.{op}(); }}"


def _torch_pch_files() -> list[str]:
    import torch.utils.cpp_extension as tce

    base = os.path.join(tce._TORCH_PATH, "include", "torch", "extension.h")
    return [base + ".gch", base + ".sign"]


@pytest.fixture(scope="module")
def pch_cache(tmp_path_factory):
    """A cache in which extension ``kc_pch_a`` was built with ``use_pch=True``; a counting compiler."""
    import kernelcache as kc
    from kernelcache import cpp_extension

    base = tmp_path_factory.mktemp("pch")
    cxx = base / "cxx-wrapper"
    cxx.write_text(WRAPPER)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    log = base / "compiles.log"
    saved = {k: os.environ.get(k) for k in ("CXX", "KC_COUNT_LOG")}
    os.environ.update(CXX=str(cxx), KC_COUNT_LOG=str(log))
    settings = kc.Settings.from_env({"KERNELCACHE_DIR": str(base / "cache"), "KERNELCACHE_LOCK_DIR": str(base / "locks"),
                                     "KERNELCACHE_LOG": "0"})
    torch_had = [os.path.exists(p) for p in _torch_pch_files()]
    try:
        mod = cpp_extension.load_inline("kc_pch_a", SRC.format(fn="sin_cos", op="cos"), functions=["sin_cos"],
                                        use_pch=True, settings=settings)
        yield settings, log, mod
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not any(torch_had):  # the shared torch install goes back to how it was
            for p in _torch_pch_files():
                if os.path.exists(p):
                    os.remove(p)


def _pch_builds(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if "c++-header" in line)


def _pch_dirs(settings) -> list[Path]:
    return [d for d in (Path(settings.cache_dir) / "v1" / "dropin" / "pch").iterdir() if d.is_dir()
            and not d.name.startswith(".")]


def _manifest(settings, name: str) -> dict:
    [entry] = [p for p in (Path(settings.cache_dir) / "v1" / "entries" / name).glob("*/*") if p.is_dir()]
    return json.loads((entry / "manifest.json").read_text())


def test_the_precompiled_header_is_built_once_and_used_by_extensions_with_the_same_flags(pch_cache):
    import torch

    from kernelcache import cpp_extension

    settings, log, mod_a = pch_cache
    x, y = torch.randn(3), torch.randn(3)
    assert torch.allclose(mod_a.sin_cos(x, y), x.sin() + y.cos())
    mod_b = cpp_extension.load_inline("kc_pch_b", SRC.format(fn="sin_tan", op="tan"), functions=["sin_tan"],
                                      use_pch=True, settings=settings)
    assert torch.allclose(mod_b.sin_tan(x, y), x.sin() + y.tan())
    assert _pch_builds(log) == 1  # shared, not rebuilt for the second extension
    [pch] = _pch_dirs(settings)
    gch = pch / "torch" / "extension.h.gch"
    for name in ("kc_pch_a", "kc_pch_b"):
        m = _manifest(settings, name)
        # g++ recorded the .gch as read (-MD): it really used it instead of parsing the headers.
        assert any(d["path"].endswith("extension.h.gch") for d in m["deps"]), name
        assert "-Winvalid-pch" in " ".join(m["inputs"]["commands"]["compile"][0])
    record = json.loads((pch / "deps.json").read_text())
    paths = [p for p, _, _ in record["files"]]
    assert any(p.endswith(os.path.join("torch", "extension.h")) for p in paths) and str(gch) in paths
    assert all(os.path.exists(p) for p in _torch_pch_files())  # where torch's own use_pch leaves them


def test_a_changed_or_foreign_precompiled_header_is_not_valid(pch_cache, tmp_path):
    from kernelcache.cpp_extension import _pch

    settings, _, _ = pch_cache
    [pch] = _pch_dirs(settings)
    copy = tmp_path / "copy"
    shutil.copytree(pch, copy, symlinks=True)
    assert _pch.is_valid(pch)
    gch = copy / "torch" / "extension.h.gch"
    record = json.loads((copy / "deps.json").read_text())
    record["files"][-1][0] = str(gch)  # the copy's record points at the copy's header
    (copy / "deps.json").write_text(json.dumps(record))
    assert _pch.is_valid(copy)  # another inode, the same bytes: keyed by content, still valid
    tmp = gch.with_name("x")
    tmp.write_bytes(b"not a precompiled header")
    os.replace(tmp, gch)  # foreign bytes under the recorded name
    assert not _pch.is_valid(copy)
    record["files"][0][1] = "0" * 64  # a header it was built from changed
    (copy / "deps.json").write_text(json.dumps(record))
    assert not _pch.is_valid(copy)
