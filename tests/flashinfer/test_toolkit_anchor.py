"""Hosts whose CUDA toolkit sits at another path share FlashInfer entries; other bytes do not.

The toolkit is copied again under the session's tmp (``conftest.toolkits``: the same bytes,
sizes and mtimes at another real path), once as is and once with one header the module reads changed
(that copy in CUDA 13's layout: headers under ``targets/x86_64-linux/include``).
A process given that toolkit (``CUDA_HOME``, no CUDA directory on ``PATH``) is another host with
the same fleet store or the same cache directory (a shared cache). The fleet test pushes the real
toolkit's entry alone (the local test builds one against the changed toolkit, in any order).
"""
from __future__ import annotations

import json
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

from tests.remote.servers import S3Server

from .conftest import FiEnv, Toolkits, without_cuda_on_path

PUSH = "import kernelcache as kc; print(len(kc.push(['silu_and_mul'])))"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    server = S3Server("seaweed", tmp_path_factory.mktemp("seaweed-tk"))
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


def test_a_host_with_the_toolkit_elsewhere_fetches_from_the_fleet_and_other_bytes_are_refused(
        fi: FiEnv, toolkits: Toolkits, store: S3Server) -> None:
    remote = {**store.env, "KERNELCACHE_REMOTE": store.url("flashinfer-toolkit")}
    # push the real toolkit's entry alone, from a cache holding only it: the session cache may
    # also hold the entry the local test below builds against the changed toolkit (any order)
    edir = Path(fi.probe(fi.tmp / "ws-a")["library"]).parent
    solo = fi.tmp / "fleet-push-cache"
    if not solo.exists():
        shutil.copytree(edir, solo / edir.relative_to(fi.cache))
    pushed = fi.run(fi.tmp / "ws-a", code=PUSH, KERNELCACHE_DIR=str(solo), KERNELCACHE_REMOTE_MODE="readwrite",
                    **remote)
    assert int(pushed.stdout.split()[-1]) == 1
    before = fi.links()

    def host(name: str, toolkit: str):
        h = fi.tmp / name
        return fi.run(h / "ws", check=False, KERNELCACHE_DIR=str(h / "cache"), KERNELCACHE_LOCK_DIR=str(h / "locks"),
                      KERNELCACHE_REMOTE_MODE="read", CXX=str(h / "no-such-compiler"), CUDA_HOME=toolkit,
                      PATH=without_cuda_on_path(fi.env(h)), FLASHINFER_DISABLE_JIT="1", **remote)

    same = host("host-tk-same", str(toolkits.same))
    assert same.returncode == 0, same.stderr[-3000:]
    assert str(fi.tmp / "host-tk-same" / "cache") in same.stdout
    other = host("host-tk-other", str(toolkits.other))
    assert other.returncode != 0 and "cached entry of 'silu_and_mul'" in other.stderr, other.stderr[-3000:]
    assert fi.links() == before


def test_a_toolkit_elsewhere_with_the_same_bytes_shares_the_entry_and_other_bytes_build_once(
        fi: FiEnv, toolkits: Toolkits) -> None:
    here = fi.probe(fi.tmp / "ws-a")
    m = json.loads((Path(here["library"]).parent / "manifest.json").read_text())
    lines = json.dumps(m["inputs"]["commands"])
    assert str(toolkits.real) not in lines and "${CUDA}/include" in lines and "${PYINC}" in lines, lines
    assert m["inputs"]["tools"]["nvcc"]["path"] == "${CUDA}/bin/nvcc"
    assert any(d["path"] == "${CUDA}/" + toolkits.real_header for d in m["deps"])
    before = fi.links()
    path = without_cuda_on_path(fi.env(fi.tmp))
    same = fi.probe(fi.tmp / "ws-tk-same", CUDA_HOME=str(toolkits.same), PATH=path)
    assert fi.links() == before, "the same toolkit at another path compiled again"
    assert same["library"] == here["library"]
    other = fi.probe(fi.tmp / "ws-tk-other", CUDA_HOME=str(toolkits.other), PATH=path)
    assert fi.links() == before + 1, f"{toolkits.changed} with other bytes must build once"
    assert other["library"] != here["library"]
    # a toolkit of CUDA 13's layout (include/ a link to targets/x86_64-linux/include) is anchored
    # alike: the changed header recorded as ${CUDA}/targets/..., where it really lies
    mo = json.loads((Path(other["library"]).parent / "manifest.json").read_text())
    assert any(d["path"] == "${CUDA}/" + toolkits.changed for d in mo["deps"]), toolkits.changed
    assert str(toolkits.other) not in json.dumps(mo["deps"]) + json.dumps(mo["inputs"])
    again = fi.probe(fi.tmp / "ws-a")  # the real toolkit still has its entry
    assert fi.links() == before + 1 and again["library"] == here["library"]


def test_the_python_include_anchor_is_the_dir_sysconfig_names() -> None:
    from kernelcache.host.anchors import python_include_dirs

    assert os.path.realpath(sysconfig.get_path("include")) in {os.path.realpath(d) for d in python_include_dirs()}


def test_the_toolkits_elsewhere_leave_the_real_one_as_every_other_process_saw_it(toolkits: Toolkits) -> None:
    """Hard links would change the real files' ctime (their link count): every hit record and
    recalled call of the other test processes that witnessed them would see a changed toolkit
    (seen in CI: a drop-in call in another worker was no longer recalled)."""
    from .conftest import _stat

    assert {rel: _stat(toolkits.real / rel) for rel in toolkits.real_stats} == toolkits.real_stats
    assert (toolkits.same / "bin/nvcc").stat().st_ino != (toolkits.real / "bin/nvcc").stat().st_ino
