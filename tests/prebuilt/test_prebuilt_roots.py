"""Issue 6, acceptance 2 and 4: prebuilt artifacts are used only when they validate here."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from kernelcache.entry import manifest

import kernelcache as kc
from kernelcache.export import roots as export
from kernelcache.storage.entry import Entry
from tests.support import HANG_S, make_project, project_spec, spec_code


@pytest.fixture
def artifact_root(kc_env, project, tmp_path, monkeypatch):
    """Build the test kernel into a scratch cache, export it as a relocatable artifact root."""
    kc.load(project_spec(project))
    path = kc_env.entries()[0]
    root = tmp_path / "artifacts"
    export.export_entry(Entry(path, manifest.read(path)), root, None)
    shutil.rmtree(kc_env.cache)  # nothing left in the writable cache
    monkeypatch.setenv("KERNELCACHE_PREBUILT", str(root))
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    kc.reset_process_state()
    return root


def test_manifest_is_relocatable(artifact_root):
    text = "".join(p.read_text() for p in artifact_root.rglob("manifest.json"))
    m = json.loads(text)
    assert all(d["path"].startswith("${ROOT}") for d in m["deps"])
    assert "/" + "tmp" not in json.dumps({k: v for k, v in m.items() if k != "deps"}).replace("${ROOT}", "")
    assert m["prebuilt"]["tvm_ffi_version"]


def test_valid_artifact_loads_without_compiler(kc_env, project, artifact_root):
    code = spec_code(project) + "import kernelcache.lookup.loader as L\nm, r = L.load_with_result(spec)\nprint(m.add(2, 3), r.status)"
    out = kc_env.run_py(code, CXX="/bin/false", KERNELCACHE_NO_BUILD="1",
                        KERNELCACHE_PREBUILT=str(artifact_root), PATH="/nonexistent").stdout.split()
    assert out == ["5", "prebuilt"]
    assert kc_env.compiles() == 1  # only the original build, nothing since


def test_artifact_from_modified_sources_is_refused(kc_env, project, artifact_root):
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 4\n")
    with pytest.raises(kc.CacheMissError) as ei:
        kc.load(project_spec(project))
    assert "package headers differ" in str(ei.value) and "kc_add.h" in str(ei.value)
    (project / "add.cc").write_text((project / "add.cc").read_text() + "// edited\n")
    with pytest.raises(kc.CacheMissError, match="different sources"):
        kc.load(project_spec(project))


def test_artifact_with_flipped_byte_is_refused(kc_env, project, artifact_root):
    so = next(artifact_root.rglob("*.so"))
    data = bytearray(so.read_bytes())
    data[len(data) // 3] ^= 0x01
    so.write_bytes(bytes(data))
    with pytest.raises(kc.CacheMissError, match="sha256"):
        kc.load(project_spec(project))
    assert so.exists()  # a read-only root is never modified or quarantined


def test_artifact_with_other_schema_is_refused_and_jit_fallback_builds(kc_env, project, artifact_root, monkeypatch):
    spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=project, include_dirs=["include"],
                         functions={"add": "Callable[[int, int], float]"})
    info = kc.explain(spec)
    assert info["prebuilt"] and not info["prebuilt"][0]["usable"] and "schema differs" in info["prebuilt"][0]["reason"]
    with pytest.raises(kc.CacheMissError, match="schema differs"):
        kc.load(spec)
    monkeypatch.delenv("KERNELCACHE_NO_BUILD")  # building allowed: falls back to JIT
    m, res = kc.load_with_result(project_spec(project))
    assert res.status == "prebuilt"  # the matching spec still uses the artifact
    project_mod = make_project(project.parent / "proj2", offset=1)
    m2, res2 = kc.load_with_result(project_spec(project_mod))
    assert res2.status == "built" and m2.add(0, 0) == 1


def test_artifact_for_another_cuda_arch_is_refused(kc_env, tmp_path, monkeypatch):
    from kernelcache.host import toolchain

    try:
        toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit to build the CUDA artifact")
    (tmp_path / "cu").mkdir()
    (tmp_path / "cu" / "k.cu").write_text(
        "#include <tvm/ffi/function.h>\n__global__ void k() {}\n"
        "int64_t ident(int64_t a) { return a; }\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(ident, ident);\n")
    spec = kc.KernelSpec(name="cuk", sources=["k.cu"], root=tmp_path / "cu", functions={"ident": "Callable[[int], int]"})
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "8.0")
    kc.load(spec)
    root = tmp_path / "cuda_artifacts"
    path = kc_env.entries("cuk")[0]
    export.export_entry(Entry(path, manifest.read(path)), root, "13")
    monkeypatch.setenv("KERNELCACHE_PREBUILT", str(root))
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    shutil.rmtree(kc_env.cache)
    with pytest.raises(kc.CacheMissError, match=r"built for arch \['8.0'\], this machine needs \['9.0'\]"):
        kc.load(spec)
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "8.0")
    kc.reset_process_state()
    assert kc.load_with_result(spec)[1].status == "prebuilt"


def test_ls_marks_prebuilt_entries(kc_env, artifact_root):
    out = subprocess.run([sys.executable, "-m", "kernelcache", "ls"], env=kc_env.env(KERNELCACHE_PREBUILT=str(artifact_root)),
                         capture_output=True, text=True, timeout=HANG_S).stdout
    assert "prebuilt:" in out and "adder" in out


def test_companion_roots_memo_follows_distributions_not_files_in_the_cwd(tmp_path, monkeypatch):
    """Writing a file in the working directory does not rescan package metadata (it did: the
    memo was keyed on the cwd's mtime); a distribution appearing there does."""
    import os
    import sys

    import kernelcache as kc
    from kernelcache.storage import prebuilt

    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c")})
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    scans = []
    real = prebuilt._scan_entry_points
    monkeypatch.setattr(prebuilt, "_scan_entry_points", lambda: scans.append(1) or real())
    os.utime(cwd, ns=(0, 0))  # the next write in the cwd moves its mtime whatever the clock's grain
    kc.reset_process_state()
    first = prebuilt.entry_point_roots(s)
    assert len(scans) == 1
    (cwd / "out.log").write_text("a script's output\n")
    kc.reset_process_state()
    assert prebuilt.entry_point_roots(s) == first and len(scans) == 1
    di = cwd / "kc_companion-1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: kc-companion\nVersion: 1.0\n")
    (di / "entry_points.txt").write_text(f"[{prebuilt.ENTRY_POINT_GROUP}]\nroot = os:curdir\n")
    kc.reset_process_state()
    assert cwd.resolve() in prebuilt.entry_point_roots(s) and len(scans) == 2


def test_the_metadata_scan_runs_only_where_a_distribution_names_the_group(tmp_path, monkeypatch):
    """Where no ``entry_points.txt`` on the import path names the group, the roots are known to
    be none without ``importlib.metadata`` parsing every distribution; one that names it (even in
    another section's text) sends the scan through ``importlib.metadata``, which decides."""
    import importlib.metadata
    import os
    import sys
    from pathlib import Path

    from kernelcache.storage import prebuilt

    site = tmp_path / "site"
    other = site / "other_pkg-1.0.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: other-pkg\nVersion: 1.0\n")
    (other / "entry_points.txt").write_text("[console_scripts]\nother = os:getcwd\n")
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing"), *sys.path])
    calls = []
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    if prebuilt._declared_somewhere():
        pytest.skip("a distribution of this environment names the group")
    assert prebuilt._scan_entry_points() == [] and calls == []
    comp = site / "kc_companion-1.0.dist-info"
    comp.mkdir()
    (comp / "METADATA").write_text("Metadata-Version: 2.1\nName: kc-companion\nVersion: 1.0\n")
    (comp / "entry_points.txt").write_text(f"[{prebuilt.ENTRY_POINT_GROUP}]\nroot = os:curdir\n")
    assert prebuilt._scan_entry_points() == [str(Path(os.curdir).resolve())]
    assert calls == [{"group": prebuilt.ENTRY_POINT_GROUP}]
