"""process_state: every process-wide memo registers its reset, and reset_process_state forgets it.

Two halves: an AST census of module-level state under ``kernelcache/`` (mutable containers,
names rebound through ``global``, module-level instances of the module's own classes), each
found memo mapped to the name it must register under (or to why it is not a memo); and, per
memo, proof through the public API that ``kernelcache.reset_process_state()`` really forgets it.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import json
import pkgutil
import stat
from pathlib import Path

import pytest
from kernelcache.base import events, process_state
from kernelcache.host import gpu, toolchain

import kernelcache as kc

PKG = Path(kc.__file__).resolve().parent

# file -> the names its memos register under
MEMOS = {
    "lookup/admit.py": {"admit.admitted"},
    "host/anchors.py": {"anchors.project_roots"},
    "entry/deprecord.py": {"deprecord.prepared"},
    "host/dir_trust.py": {"dir_trust.checked"},
    "base/events.py": {"events.counters"},
    "host/gpu.py": {"gpu.detection"},
    "host/native.py": {"native.cpu_features"},
    "flashinfer/_gate.py": {"flashinfer.said"},
    "flashinfer/_route.py": {"flashinfer.loaded"},
    "sglang/_gate.py": {"sglang.said"},
    "sglang/_route.py": {"sglang.loaded"},
    "kinds/flashinfer.py": {"kinds.flashinfer.record"},
    "kinds/registry.py": {"kinds.registry.plugins"},
    "impact/environment.py": {"impact.environment"},
    "impact/record.py": {"impact.record._active"},
    "host/toolchain.py": {"toolchain.identities", "toolchain.tvm_ffi_paths"},
    "storage/prebuilt.py": {"prebuilt.entry_point_roots"},
    "storage/prebuilt_sign.py": {"prebuilt_sign.verifiers"},
    "host/installed.py": {"installed.listings"},
    "host/system_packages.py": {"system_packages.listings"},
    "lookup/fleet.py": {"fleet.clients"},
    "storage/remote/client.py": {"remote.down_state"},
    "base/interrupt.py": {"interrupt.stop"},
    "kernels/config.py": {"kernels.settings"},
    "kernels/ngram_corpus/call.py": {"kernels.ngram_corpus.native"},
    "kernels/speculative_sampling/call.py": {"kernels.speculative_sampling.runtime"},
    "cpp_extension/_versions.py": {"cpp_extension.versions"},
    "lockfile/serve.py": {"lockfile.serve.memo"},
}
# module-level state that is not a forgettable memo: file -> {name: why}
NOT_MEMOS = {
    "base/process_state.py": {"_resets": "the registry itself"},
    "storage/remote/client.py": {"_held": "compile leases this process holds (released at exit), not a memo"},
    "base/interrupt.py": {"_cleanups": "what SIGTERM runs (registered once per module import)",
                     "_installed": "the SIGTERM disposition to put back (sigterm_cleanup owns it)",
                     "_depth": "nesting of sigterm_cleanup in the main thread (it owns it)"},
    "lookup/admit.py": {},  # _state.dlopened is kept on purpose: dlopen never forgets a path
    "kernels/speculative_sampling/call.py": {},
    "tvm_ffi/_patch.py": {"_saved": "what install() replaced; uninstall() restores it",
                          "_installed_settings": "whether the patch is installed (install/uninstall own it)"},
    "tvm_ffi/_api.py": {"_ORIGINALS": "tvm_ffi.cpp's functions, saved before patching (never stale)"},
    "cpp_extension/_patch.py": {"_installed": "whether the torch drop-in is installed (install/uninstall own it)"},
    "patch/_hook.py": {"_armed": "import hooks waiting for their module (arm owns them; they run once)"},
    "cpp_extension/_torch_side.py": {"_ORIGINALS": "torch's functions, saved before patching (never stale)"},
    "impact/record.py": {"_installed": "whether the event listener is installed (once per process)"},
    "pytest_plugin/impact.py": {"api": "a lazily imported module", "record": "a lazily imported module"},
}
# memos in files other branches of issue 18 are reworking; the integrator empties this once
# they register. file -> names found there.
PENDING: dict[str, set[str]] = {}

_CONTAINERS = {"dict", "set", "list", "Counter", "defaultdict", "OrderedDict", "deque"}


def _is_state(value: ast.expr, own_classes: set[str]) -> bool:
    if isinstance(value, (ast.Dict, ast.Set, ast.List)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in _CONTAINERS or name in own_classes
    return False


def module_state(path: Path) -> set[str]:
    """Names of module-level state in ``path``: containers, own-class instances, globals rebound
    by functions. Upper-case names are constants (tables, regexes); locks guard state, they are
    not state."""
    tree = ast.parse(path.read_text())
    own = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    found = set()
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = [t for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if t.id.isupper() or t.id.lstrip("_").isupper() or t.id == "__all__":
                continue  # constants (tables, regexes)
            if _is_state(value, own):
                found.add(t.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.update(node.names)
    return found


def _files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if p.name != "__main__.py")


def _import_everything() -> None:
    for info in pkgutil.walk_packages([str(PKG)], "kernelcache."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency (obstore, cryptography) is missing
            pass


def test_every_module_level_state_is_a_registered_memo_or_explained():
    unexplained = []
    for path in _files():
        rel = str(path.relative_to(PKG))
        state = module_state(path)
        if not state:
            continue
        explained = set(NOT_MEMOS.get(rel, {})) | PENDING.get(rel, set())
        if rel not in MEMOS and state - explained:
            unexplained.append(f"{rel}: {sorted(state - explained)}")
    assert not unexplained, ("module-level state without a registered reset (register it with "
                             "process_state.register and list it in MEMOS, or explain it in NOT_MEMOS):\n"
                             + "\n".join(unexplained))


def test_every_listed_memo_is_registered_once_its_module_is_imported():
    _import_everything()
    expected = set().union(*MEMOS.values())
    assert expected <= set(process_state.registered()), expected - set(process_state.registered())
    for rel in MEMOS:
        assert module_state(PKG / rel), f"{rel} lists memos but has none (update MEMOS)"


def test_pending_lists_only_state_that_is_still_there():
    for rel, names in PENDING.items():
        path = PKG / rel
        if rel in MEMOS or not path.exists() or not names & module_state(path):
            pytest.fail(f"{rel}: registered, moved or gone; update PENDING")


# -- each memo is really forgotten --------------------------------------------------------------
def test_events_counters_are_forgotten():
    events.emit("hit", name="probe_kernel")
    assert kc.stats()["hits"] >= 1 and "probe_kernel" in kc.stats()["kernels"]
    kc.reset_process_state()
    assert kc.stats()["hits"] == 0 and kc.stats()["kernels"] == {}


def test_tool_identities_are_forgotten(tmp_path):
    calls = []
    skey = ("probe", str(tmp_path))
    compute = lambda: calls.append(1) or {"v": len(calls)}  # noqa: E731
    assert toolchain.disk_memo("probe", skey, compute) == {"v": 1}
    assert toolchain.disk_memo("probe", skey, compute) == {"v": 1} and len(calls) == 1
    kc.reset_process_state()
    assert toolchain.disk_memo("probe", skey, compute) == {"v": 2}


def test_tvm_ffi_paths_are_forgotten():
    first = toolchain.tvm_ffi_paths()
    assert toolchain.tvm_ffi_paths() is first
    kc.reset_process_state()
    again = toolchain.tvm_ffi_paths()
    assert again is not first and again == first


def test_gpu_detection_is_forgotten(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    line = "0, NVIDIA H100, 9.0, 81559, GPU-{}"

    def lists(n: int) -> None:
        rows = "\\n".join(line.format(i) for i in range(n))
        smi.write_text(f"#!/bin/sh\nprintf '{rows}\\n'\n")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)

    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    lists(1)
    kc.reset_process_state()
    assert gpu.detect_gpus(cuda_visible_devices=None)["count"] == 1
    lists(2)
    assert gpu.detect_gpus(cuda_visible_devices=None)["count"] == 1  # memoised
    kc.reset_process_state()
    assert gpu.detect_gpus(cuda_visible_devices=None)["count"] == 2


def test_companion_roots_are_forgotten(tmp_path):
    from kernelcache.storage import prebuilt

    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c")})
    first = prebuilt.entry_point_roots(s)
    assert prebuilt.entry_point_roots(s) is first
    kc.reset_process_state()
    assert prebuilt.entry_point_roots(s) is not first


def test_prebuilt_verify_keys_and_hashed_binaries_are_forgotten(tmp_path):
    """A root's verify keys are parsed once per process and a signed binary hashed once per stat:
    a reset reads a replaced key file again (a key rotated in place is not trusted from memory)."""
    pytest.importorskip("cryptography")
    from kernelcache.storage import prebuilt_sign
    from kernelcache.storage.remote import signing

    signing.keygen(tmp_path / "a.key", tmp_path / "a.pub")
    signing.keygen(tmp_path / "b.key", tmp_path / "b.pub")
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "k.so").write_bytes(b"\x7fELF binary")
    manifest = json.dumps({"so_name": "k.so", "so_size": 11, "so_sha256": hashlib.sha256(b"\x7fELF binary").hexdigest()})
    (entry / "manifest.json").write_text(manifest)
    prebuilt_sign.sign_entry(entry, tmp_path / "b.key")

    def why() -> str | None:
        return prebuilt_sign.refusal(entry, manifest.encode(), json.loads(manifest), (tmp_path / "a.pub",))

    assert "signed by unknown key" in (why() or "")
    (tmp_path / "a.pub").write_bytes((tmp_path / "b.pub").read_bytes())  # the trusted key file replaced
    assert "signed by unknown key" in (why() or "")  # remembered
    kc.reset_process_state()
    assert why() is None


def test_kernels_settings_are_forgotten(tmp_path):
    from kernelcache import kernels

    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c")})
    kernels.configure(s)
    assert kernels.configured() is s
    kc.reset_process_state()
    assert kernels.configured() is None


def test_shipped_kernels_forget_their_modules():
    from kernelcache.kernels.ngram_corpus import call as ngram
    from kernelcache.kernels.speculative_sampling import call as tree

    sentinel = object()
    try:
        ngram.native.module = sentinel
        tree.runtime.module, tree.runtime.functions["f"] = sentinel, sentinel
        tree.fast.fn = tree.fast.tensor = sentinel
        assert ngram.native.get() is sentinel and tree.module() is sentinel and tree.function("f") is sentinel
    finally:
        kc.reset_process_state()
    assert ngram.native.module is None and tree.runtime.module is None and tree.runtime.functions == {}
    assert tree.fast.fn is None and tree.fast.tensor is None


def test_admitted_modules_are_forgotten(built_adder):
    first = kc.load(built_adder.spec, settings=built_adder.settings)
    assert kc.load(built_adder.spec, settings=built_adder.settings) is first
    kc.reset_process_state()
    again = kc.load(built_adder.spec, settings=built_adder.settings)
    assert again is not first and again.add(2, 3) == 5
    assert kc.stats()["hits"] == 1 and kc.stats()["builds"] == 0  # re-admitted from disk, not rebuilt


def test_fleet_clients_and_the_down_state_are_forgotten(tmp_path):
    from kernelcache.base.settings import RemoteSettings
    from kernelcache.lookup import fleet

    share = tmp_path / "share"
    share.mkdir()
    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c")}).replace(
        remote=RemoteSettings(f"file://{share}", "read", timeout=2))
    rc = fleet.client(s)
    assert fleet.client(s) is rc
    share.rmdir()  # the share goes away: the first request marks the remote down for the process
    with pytest.raises(Exception, match="unreachable"):
        rc.list_entries("k", "0" * 64)
    assert rc.down_reason
    kc.reset_process_state()
    again = fleet.client(s)
    assert again is not rc and again.down_reason is None


def test_prepared_trust_groups_are_forgotten(tmp_path):
    from kernelcache.entry import deprecord

    header = tmp_path / "x.h"
    header.write_text("int x;\n")
    deprecord.prepare([str(header)])
    assert deprecord._prepared
    kc.reset_process_state()
    assert not deprecord._prepared


def test_system_package_listings_are_forgotten(tmp_path, monkeypatch):
    from kernelcache.host import system_packages

    (tmp_path / "info").mkdir()
    (tmp_path / "status").write_text("Package: p\n")
    (tmp_path / "info" / "p.md5sums").write_text("0" * 32 + "  usr/include/x.h\n")
    monkeypatch.setenv("DPKG_ADMINDIR", str(tmp_path))
    system_packages._listing(system_packages.admindir())
    listing = {b"usr/include/x.h": (str(tmp_path / "info" / "p.md5sums"), b"0" * 32)}
    assert system_packages._memo[str(tmp_path)][1] == listing
    kc.reset_process_state()
    assert str(tmp_path) not in system_packages._memo


def test_register_replaces_and_reset_all_calls_each():
    calls = []
    process_state.register("test.probe", lambda: calls.append("a"))
    process_state.register("test.probe", lambda: calls.append("b"))  # same name: replaced
    try:
        kc.reset_process_state()
        assert calls == ["b"] and "test.probe" in process_state.registered()
    finally:
        process_state.register("test.probe", lambda: None)


def test_torch_extension_versions_are_forgotten():
    from kernelcache.cpp_extension import _versions

    assert _versions.version_for("probe_ext", "a") == (0, True)
    _versions.loaded("probe_ext", "a", 0)
    assert _versions.version_for("probe_ext", "a") == (0, False)
    assert _versions.version_for("probe_ext", "b") == (1, True)
    kc.reset_process_state()
    assert _versions.version_for("probe_ext", "b") == (0, True)
