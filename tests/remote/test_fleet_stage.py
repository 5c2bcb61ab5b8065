"""The fleet stage beside the loader (issue 18): a typed request with an ``accept`` door in, a
typed outcome out; one installation check per fetched entry; storage never imports the stage."""
from __future__ import annotations

from pathlib import Path

import pytest
from kernelcache.base.settings import RemoteSettings, Settings
from kernelcache.base.spec import KernelSpec
from kernelcache.entry import validate
from kernelcache.host import anchors, toolchain

from kernelcache import kinds
from kernelcache.storage.local import LocalStore

from .hosts import Host, make_project
from .remotes import clean_env


def _spec(project: Path) -> KernelSpec:  # the spec hosts.py's LOAD builds
    return KernelSpec(name="fleet_k", sources=["add.cc"], root=project, include_dirs=["include"],
                      functions={"add": "Callable[[int, int], int]"})


@pytest.fixture
def published(file_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "a", clean_env(KERNELCACHE_REMOTE=file_remote.url, KERNELCACHE_REMOTE_MODE="readwrite"))
    assert a.load(project)["status"] == "built" and a.events("remote_upload")
    s = Settings(cache_dir=tmp_path / "b" / "cache", lock_dir=tmp_path / "b" / "locks",
                 remote=RemoteSettings(file_remote.url, "read", timeout=5))
    return project, s


def _request(spec: KernelSpec, s: Settings, accept, can_build: bool = True):
    from kernelcache.lookup.fleet import FleetRequest

    tvm = toolchain.tvm_ffi_paths(s.memo_dir).version
    inst = validate.Installation(tvm, anchors.anchors_of(spec), s.cuda_arch)
    return FleetRequest(spec, s, kinds.source_key(spec, (), tvm, s), inst, LocalStore(s), accept, can_build)


def test_outcome_with_a_door_that_accepts(published):
    from kernelcache.lookup.fleet import FleetOutcome, obtain

    project, s = published
    seen = []
    out = obtain(_request(_spec(project), s, lambda entry: seen.append(entry) or "the module"))
    assert isinstance(out, FleetOutcome)
    assert out.module == "the module" and out.entry is seen[0] and out.lease is None
    assert out.entry.origin == "fetched" and out.entry.path.is_relative_to(s.cache_dir)
    assert out.remote.startswith("file://")


def test_outcome_with_a_door_that_rejects(published):
    from kernelcache.lookup.fleet import obtain

    project, s = published
    out = obtain(_request(_spec(project), s, lambda entry: validate.Rejection("identity", "not the one")))
    assert out.module is None and out.lease is None
    assert any("rejected after download" in m and "not the one" in m for m in out.misses), out.misses
    assert not list((s.cache_dir / "v1").glob("fetched/*/*/*"))  # the rejected entry went to quarantine
    assert list((s.cache_dir / "v1" / "quarantine").iterdir())


def test_one_installation_check_per_fetched_entry(published, monkeypatch):
    """Through the real loader: the manifest is checked once, before the download; the door then
    admits the bytes (no second installation check, as there was before)."""
    import kernelcache as kc

    project, s = published
    calls = []
    real = validate.installation_refusal
    monkeypatch.setattr(validate, "installation_refusal", lambda *a, **k: calls.append(a[1].entry_id) or real(*a, **k))
    mod, res = kc.load_with_result(_spec(project), settings=s)
    assert res.status == "remote" and mod.add(2, 3) == 5
    assert len(calls) == 1, calls


def test_storage_never_imports_the_stage():
    import grimp

    graph = grimp.build_graph("kernelcache")
    for module in graph.find_descendants("kernelcache.storage") | {"kernelcache.storage"}:
        imported = graph.find_modules_directly_imported_by(module)
        assert not imported & {"kernelcache.lookup.fleet", "kernelcache.lookup.push", "kernelcache.lookup.loader"}, module
