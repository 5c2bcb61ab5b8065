"""Issue 40: a kind from outside the package (a plain C library loaded with ctypes, declared by a
pip-installed distribution in the entry-point group ``kernelcache.kinds``) gets what every kind
gets, through ``kc.load`` of a ``KernelSpec(kind="clib")`` in real processes:

* the key: a header edit rebuilds, and so does a same-size edit with its mtime put back;
* the cache: a second process hits with 0 builds (recalled, through the kind's own lean load);
* the build lock: two processes at once, one build, the other waits and hits;
* ``kernelcache explain``: its status and kind;
* the fleet: ``kernelcache push`` from one cache to a ``file://`` remote, fetched into an empty
  cache on a host with no compiler at all (0 compiles, 0 builds);
* a process without the distribution gets a clear error naming the group; a broken entry point
  is named with its distribution, and leaves the other kinds working.

Before issue 40 the kind could not exist: ``kinds.of`` knew only files of ``kernelcache/kinds``,
and every binary had to export ``__tvm_ffi_<fn>`` with schemas.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import HANG_S, REPO, WRAPPER, compilerless_path

from .toykind import install

LOAD = """
import json, sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name="toy_add", sources=["add.c"], root=Path(sys.argv[1]), include_dirs=["include"],
                     functions={"toy_add": None}, kind=sys.argv[2] if len(sys.argv) > 2 else "clib")
out = {}
try:
    lib = kc.load(spec)
    out.update(value=lib.toy_add(2, 3), path=lib._name, recalled="kernelcache.lookup.loader" not in sys.modules)
except kc.KernelCacheError as e:
    out.update(error=type(e).__name__, message=str(e))
if len(sys.argv) > 3:  # then the plugin kind in the same process
    out["after"] = kc.load(kc.KernelSpec(name="toy_add", sources=["add.c"], root=Path(sys.argv[1]),
                                         include_dirs=["include"], functions={"toy_add": None},
                                         kind="clib")).toy_add(2, 3)
st = kc.stats()
out.update({k: st[k] for k in ("builds", "hits", "remote_hits", "lock_waits", "misses")})
print("RESULT " + json.dumps(out))
"""
SPECS = """\
from pathlib import Path
import kernelcache as kc

def specs():
    return kc.KernelSpec(name="toy_add", sources=["add.c"], root=Path(__file__).parent, include_dirs=["include"],
                         functions={"toy_add": None}, kind="clib")
"""
SOURCE = '#include "toy.h"\nint toy_add(int a, int b) { return a + b + TOY_OFFSET; }\n'
CC_WRAPPER = WRAPPER.replace("exec g++", "exec gcc")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("toykind"))


class Box:
    """One host: its own cache, lock dir, compiler wrappers (counting), event log."""

    def __init__(self, base: Path, site: Path | None, **extra: str) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        for name, text in (("cxx", WRAPPER), ("cc", CC_WRAPPER)):
            p = base / name
            p.write_text(text)
            p.chmod(p.stat().st_mode | stat.S_IEXEC)
        self.site, self.extra = site, extra
        self.log = base / "compiles.log"

    def env(self, **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "KC_"))}
        path = [str(self.site)] if self.site else []
        e.update({"KERNELCACHE_DIR": str(self.base / "cache"), "KERNELCACHE_LOCK_DIR": str(self.base / "locks"),
                  "KC_COUNT_LOG": str(self.log), "CXX": str(self.base / "cxx"), "CC": str(self.base / "cc"),
                  "KERNELCACHE_LOG": str(self.base / "events.jsonl"),
                  "PYTHONPATH": os.pathsep.join([*path, str(REPO)])})
        e.update(self.extra)
        e.update(extra)
        return e

    def compiles(self) -> int:
        try:
            return sum(1 for line in self.log.read_text().splitlines() if line.startswith("compile "))
        except FileNotFoundError:
            return 0

    def events(self, event: str) -> list[dict]:
        try:
            lines = (self.base / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [e for e in map(json.loads, filter(None, lines)) if e.get("event") == event]

    def start(self, proj: Path, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", LOAD, str(proj), *args], env=self.env(**env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)

    def load(self, proj: Path, *args: str, **env: str) -> dict:
        return finish(self.start(proj, *args, **env))

    def cli(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kernelcache", *args], env=self.env(**env), cwd=cwd,
                              capture_output=True, text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)


def finish(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=HANG_S)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"process failed ({p.returncode}):\n{out}\n{err}")


def project(base: Path, offset: int = 0) -> Path:
    (base / "include").mkdir(parents=True, exist_ok=True)
    (base / "add.c").write_text(SOURCE)
    (base / "include" / "toy.h").write_text(f"#define TOY_OFFSET {offset}\n")
    (base / "kcspecs.py").write_text(SPECS)
    return base


def test_key_cache_recall_and_explain(site: Path, tmp_path: Path) -> None:
    proj = project(tmp_path / "proj")
    box = Box(tmp_path / "host", site)
    first = box.load(proj)
    assert first["value"] == 5 and first["builds"] == 1 and box.compiles() == 1, first
    assert first["path"].startswith(str(box.base / "cache"))

    again = box.load(proj)  # another process: a hit, recalled through the kind's lean load
    assert again == {**again, "value": 5, "builds": 0, "hits": 1, "recalled": True}, again
    assert box.compiles() == 1

    r = box.cli("explain", "toy_add", "--spec", "kcspecs:specs", "--json", cwd=proj)
    info = json.loads(r.stdout)
    assert r.returncode == 0 and info["status"] == "hit" and info["kind"] == "clib", r.stdout + r.stderr

    header = proj / "include" / "toy.h"
    header.write_text("#define TOY_OFFSET 1\n")  # an edit: rebuilt
    edited = box.load(proj)
    assert edited["value"] == 6 and edited["builds"] == 1 and box.compiles() == 2, edited

    st = header.stat()
    header.write_text("#define TOY_OFFSET 2\n")  # same size, mtime put back: rebuilt all the same
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    restored = box.load(proj)
    assert restored["value"] == 7 and restored["builds"] == 1 and box.compiles() == 3, restored

    # a process without the distribution: a clear error naming the group, nothing built
    bare = Box(tmp_path / "host", None)
    missing = bare.load(proj)
    assert missing["error"] == "SpecError" and "'clib'" in missing["message"], missing
    assert "kernelcache.kinds" in missing["message"] and missing["builds"] == 0, missing
    r = bare.cli("explain", "toy_add")  # the cache's records name a kind this process does not know
    assert r.returncode == 0 and "unknown module kind 'clib'" in r.stdout, r.stdout + r.stderr
    assert box.compiles() == 3


def test_build_lock_one_build_for_two_processes(site: Path, tmp_path: Path) -> None:
    proj = project(tmp_path / "proj")
    gate = tmp_path / "go"
    box = Box(tmp_path / "host", site, KC_HOLD_COMPILE=str(gate))
    holder = box.start(proj)
    deadline = time.monotonic() + HANG_S
    while box.compiles() < 1:  # the holder is compiling (held at the gate)
        assert holder.poll() is None, finish(holder)
        if time.monotonic() > deadline:  # only stops a hung test
            pytest.fail(f"the holder never started compiling: {finish(holder)}")
        time.sleep(0.02)
    waiter = box.start(proj)
    while not box.events("lock_wait_start"):  # the second process waits for the lock
        assert waiter.poll() is None, finish(waiter)
        if time.monotonic() > deadline:  # only stops a hung test
            pytest.fail(f"the second process never waited for the lock: {finish(waiter)}")
        time.sleep(0.02)
    gate.touch()
    a, b = finish(holder), finish(waiter)
    assert a["value"] == b["value"] == 5, (a, b)
    assert (a["builds"], b["builds"]) == (1, 0) and b["lock_waits"] == 1 and b["hits"] == 1, (a, b)
    assert box.compiles() == 1


def test_fleet_push_then_fetch_on_a_host_without_a_compiler(site: Path, tmp_path: Path) -> None:
    proj = project(tmp_path / "proj")
    remote = tmp_path / "remote"
    remote.mkdir()
    url = remote.as_uri()
    a = Box(tmp_path / "a", site)
    assert a.load(proj)["builds"] == 1
    pushed = a.cli("push", "toy_add", "--remote", url, "--remote-mode", "readwrite")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert list(remote.rglob("*")), "nothing uploaded"

    b = Box(tmp_path / "b", site, PATH=compilerless_path(tmp_path / "bare-bin"), CXX="", CC="",
            KERNELCACHE_NO_BUILD="1", KERNELCACHE_REMOTE=url, KERNELCACHE_REMOTE_MODE="read")
    got = b.load(proj)
    assert got["value"] == 5 and got["builds"] == 0 and got["remote_hits"] == 1, got
    assert got["path"].startswith(str(b.base / "cache")) and b.compiles() == 0
    again = b.load(proj)  # fetched once: the next process finds it in its own cache
    assert again["value"] == 5 and again["remote_hits"] == 0 and again["builds"] == 0, again


def test_broken_plugin_is_named_and_other_kinds_still_load(site: Path, tmp_path: Path) -> None:
    proj = project(tmp_path / "proj")
    box = Box(tmp_path / "host", site)
    got = box.load(proj, "broken_kind", "then-clib")
    assert got["error"] == "SpecError", got
    for part in ("broken_kind", "kc_toykind_broken:KIND", "kc-toykind", "RuntimeError", "on purpose"):
        assert part in got["message"], got["message"]
    assert got["after"] == 5 and got["builds"] == 1, got
