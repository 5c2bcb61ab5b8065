"""Issue 46: a tvm-ffi version bump re-keyed torch extensions, which never link tvm-ffi, and its
miss reason printed two whole dicts. "Links tvm-ffi" is the kind's fact (``Kind.checks.tvm_ffi``):
only such kinds carry tvm-ffi's identity in the level-1 key ("abi"), the source key
("tvm_ffi_abi") and the installation check of an entry built elsewhere.

The bump is real to kernelcache: a later process finds apache-tvm-ffi 0.2.0 (distribution metadata
first on its path, the package where it is), as after ``pip install -U apache-tvm-ffi``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..support import KcEnv, make_project, project_spec
from ..torch_ext.helpers import PARAM_V1, SEED_NAME, write_seed

pytest.importorskip("torch")

BUMPED = "0.2.0"
BUILD_TORCH = r"""
import torch
import kernelcache as kc
from kernelcache import cpp_extension
kc.load(cpp_extension.make_spec({name!r}, [{src!r}]))
"""
AFTER_BUMP = r"""
import json
import torch
import kernelcache as kc
from kernelcache import cpp_extension
from kernelcache.host import toolchain
from kernelcache.base.errors import CacheMissError
from tests.support import project_spec
from pathlib import Path
out = {{"tvm_ffi": toolchain.tvm_ffi_paths().version}}
_, res = kc.load_with_result(cpp_extension.make_spec({name!r}, [{src!r}]))
out["torch"] = [str(res.status), res.entry_path]
try:
    kc.load_with_result(project_spec(Path({proj!r})))
    out["tvm"] = "loaded"
except CacheMissError as e:
    out["tvm"] = e.reason
print("RESULT " + json.dumps(out))
"""


def _bumped_tvm_ffi(dst: Path, memo_dirs: list[Path], before: str) -> Path:
    """A directory that, first on a process's path, makes the installed tvm-ffi read as version
    0.2.0 (its distribution metadata, as ``pip install -U`` leaves it; the package itself stays in
    site-packages). The memoised version is dropped, as the upgrade's change of site-packages
    would have dropped it."""
    info = dst / f"apache_tvm_ffi-{BUMPED}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: apache-tvm-ffi\nVersion: {BUMPED}\n")
    for d in memo_dirs:
        for f in d.glob("*.json"):
            if json.loads(f.read_text() or "null") == {"version": before}:
                f.unlink()
    return dst


def _result(proc) -> dict:
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_tvm_ffi_bump_keeps_torch_extensions_and_misses_tvm_ffi_modules_in_one_line(
        kc_env: KcEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcache.entry.manifest import read
    from kernelcache.export.roots import export_entry
    from kernelcache.host import toolchain

    import kernelcache as kc
    from kernelcache.storage.entry import Entry

    before = toolchain.tvm_ffi_paths().version
    assert before != BUMPED
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(kc_env.tmp / "te"))
    proj = make_project(kc_env.tmp / "proj")
    kc.load(project_spec(proj))
    src = write_seed(kc_env.tmp / "seed", PARAM_V1)
    kc_env.run_py(BUILD_TORCH.format(name=SEED_NAME, src=str(src)))
    [torch_entry] = kc_env.entries(SEED_NAME)
    root = kc_env.tmp / "root"  # the torch extension exported, as to serving hosts
    export_entry(Entry(torch_entry, read(torch_entry)), root, None)

    shadow = _bumped_tvm_ffi(kc_env.tmp / "bumped", [kc.Settings.from_env().memo_dir], before)
    path = f"{shadow}:{kc_env.env()['PYTHONPATH']}"
    code = AFTER_BUMP.format(name=SEED_NAME, src=str(src), proj=str(proj))
    got = _result(kc_env.run_py(code, PYTHONPATH=path, KERNELCACHE_NO_BUILD="1"))
    assert got["tvm_ffi"] == BUMPED, got  # the later process sees the bump
    assert got["torch"] == ["hit", str(torch_entry)], got  # never re-keyed: it does not link tvm-ffi
    reason = got["tvm"]
    assert reason == f"ABI changed: tvm_ffi_version {before} -> {BUMPED}", reason  # what differs, once

    # a host with the bumped tvm-ffi and an empty cache is served the exported torch extension
    host = {"KERNELCACHE_DIR": str(kc_env.tmp / "host-cache"), "KERNELCACHE_PREBUILT": str(root)}
    got = _result(kc_env.run_py(code, PYTHONPATH=path, KERNELCACHE_NO_BUILD="1", **host))
    assert got["torch"][0] == "prebuilt" and got["torch"][1].startswith(str(root)), got
