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
    """``pch/<flags key>/<content digest>/``: the published precompiled headers."""
    return [d.parent for d in (Path(settings.cache_dir) / "v1" / "dropin" / "pch").glob("*/*/deps.json")]


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
    record = json.loads((pch / "deps.json").read_text())
    paths = [p for p, _, _ in record["files"]]
    assert any(p.endswith(os.path.join("torch", "extension.h")) for p in paths) and len(paths) > 100
    for name in ("kc_pch_a", "kc_pch_b"):
        m = _manifest(settings, name)
        # g++ loaded the precompiled header instead of parsing torch's headers: none was read
        assert not [d["path"] for d in m["deps"] if "torch" in d["path"] or "pybind11" in d["path"]], name
        compile_line = m["inputs"]["commands"]["compile"][0]
        # the extension names the header's content directory: its key follows the headers' bytes
        assert f"-I{pch}" in compile_line and "-Winvalid-pch" in compile_line
    # (torch's own copy in torch/include is not asserted here: plain torch's load_inline in any
    # other process removes it; torch's test_gen_extension_h_pch checks it, see RESULTS.md)


def test_a_changed_or_foreign_precompiled_header_is_not_valid(pch_cache, tmp_path):
    from kernelcache.cpp_extension import _pch

    settings, _, _ = pch_cache
    [pch] = _pch_dirs(settings)
    copy = tmp_path / "copy"
    shutil.copytree(pch, copy, copy_function=os.link)  # hard links: the ~0.8 GB header is not copied
    assert _pch.is_valid(pch) and _pch.is_valid(copy)
    original = (copy / "deps.json").read_text()

    def record_says(change) -> bool:
        record = json.loads(original)
        change(record)
        (copy / "deps.json").write_text(json.dumps(record))
        return _pch.is_valid(copy)

    # another stat, the same bytes (a touched header, a restored cache): still valid, content decides
    assert record_says(lambda r: r["files"][0].__setitem__(2, [0, 0, 0]))
    # a header it was built from holds other bytes now: never used
    assert not record_says(lambda r: (r["files"][0].__setitem__(2, [0, 0, 0]), r["files"][0].__setitem__(1, "0" * 64)))
    (copy / "deps.json").write_text(original)
    assert _pch.is_valid(copy)
    gch = copy / "torch" / "extension.h.gch"
    tmp = gch.with_name("x")
    tmp.write_bytes(b"not a precompiled header")
    os.replace(tmp, gch)  # foreign bytes under the recorded name
    assert not _pch.is_valid(copy) and _pch.is_valid(pch)
