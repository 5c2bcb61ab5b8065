"""More failure reports from the JIT-cache survey (numbered as in docs/cache_protocol.md), provoked."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from kernelcache.entry import manifest
from kernelcache.host import toolchain

import kernelcache as kc
from kernelcache import kinds
from kernelcache.build import lock
from kernelcache.key import level1
from tests.support import make_project, project_spec, spec_code


def _key1(spec) -> str:
    s = kc.Settings.from_env()
    return level1.level1(kinds.make_plan(spec, s), s).key


def test_orphaned_lock_artifacts_of_a_dead_builder_do_not_block(kc_env, project):
    """#3/#1: a persistent cache volume holding a lock file and holder note of a dead process."""
    lf = lock.lock_path_for(_key1(project_spec(project)), kc.Settings.from_env())
    lf.parent.mkdir(parents=True, exist_ok=True)
    lf.write_text("")
    Path(str(lf) + ".holder").write_text(json.dumps({"pid": 999999, "host": "gone", "since": time.time() - 3600}))
    assert kc.load(project_spec(project)).add(1, 1) == 2
    assert kc.stats()["lock_waits"] == 0 and kc.stats()["builds"] == 1
    assert lf.exists()  # #29: lock files are never unlinked


def test_symlinked_toolchain_spellings_share_a_key(kc_env, project, tmp_path, monkeypatch):
    """#10: /usr/local/cuda vs /usr/local/cuda-13.x, or a compiler reached through a symlink."""
    base = _key1(project_spec(project))
    link = tmp_path / "bin" / "c++-link"
    link.symlink_to(kc_env.cxx)
    monkeypatch.setenv("CXX", str(link))
    assert _key1(project_spec(project)) == base
    try:
        home = toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit")
    cu = tmp_path / "cu"
    cu.mkdir()
    (cu / "k.cu").write_text("// nothing\n")
    spec = kc.KernelSpec(name="cu", sources=["k.cu"], root=cu)
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    monkeypatch.setenv("CUDA_HOME", home)
    k_real = _key1(spec)
    cuda_link = tmp_path / "cuda"
    cuda_link.symlink_to(home)
    monkeypatch.setenv("CUDA_HOME", str(cuda_link))
    assert _key1(spec) == k_real


def test_concurrent_builds_of_different_kernels_do_not_collide(kc_env, tmp_path):
    """#28: parallel builds of different modules, each in its own private directory."""
    specs = [project_spec(make_project(tmp_path / f"p{i}", offset=i), name=f"k{i}") for i in range(3)]
    results = kc.warm(specs, jobs=3)
    assert [r.status for r in results] == ["built"] * 3, [r.reason for r in results]
    assert [kc.load(s).add(0, 0) for s in specs] == [0, 1, 2]
    assert kc_env.compiles() == 3


def test_loser_of_a_publish_race_uses_its_own_copy_when_the_winner_is_incomplete(kc_env, project, tmp_path):
    """#31: the winner's entry directory exists but is not (yet) readable, as on NFS."""
    probe_cache = tmp_path / "probe_cache"
    out = kc_env.run_py(spec_code(project) + "import kernelcache.lookup.loader as L\n"
                        "m, r = L.load_with_result(spec)\nprint(r.entry_path)", KERNELCACHE_DIR=str(probe_cache))
    probe_entry = Path(out.stdout.strip())
    eid, kdir = probe_entry.name, probe_entry.parent.name
    # the "winner": same entry id in our cache, but without a manifest (not visible/complete yet)
    winner = kc_env.cache / "v1" / "entries" / "adder" / kdir / eid
    winner.mkdir(parents=True)
    (winner / "adder.so.partial").write_bytes(b"\0" * 10)
    mod, res = kc.load_with_result(project_spec(project))
    assert mod.add(2, 2) == 4 and res.status == "built"
    assert kc.stats()["publish_races_lost"] == 1
    assert Path(res.entry_path).parent.name == "tmp"  # loaded from its own complete build
    assert manifest.read(winner) is None  # the incomplete directory was left alone


def test_max_jobs_one_still_builds_and_failures_raise(kc_env, tmp_path, monkeypatch):
    """#2: low parallelism limits (MAX_JOBS / pids.max) must not turn into hangs."""
    monkeypatch.setenv("MAX_JOBS", "1")
    p = make_project(tmp_path / "mj")
    assert kc.load(project_spec(p)).add(1, 2) == 3
    (p / "add.cc").write_text("#error provoked\n")
    with pytest.raises(kc.BuildError, match="provoked"):
        kc.load(project_spec(p))
    assert os.environ["MAX_JOBS"] == "1"
