"""One record style (records.FrozenRecord): dataclass-shaped to the type checker and at run time.

Why a test runs mypy: the records take ``*args`` at run time (no per-class ``exec``), so only the
``dataclass_transform`` marker lets a checker see their fields; without it ``Settings(no_bulid=True)``
type-checks and fails only when run."""
from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from kernelcache.base.events import RejectCode, Status
from kernelcache.base.settings import RemoteSettings, Settings
from kernelcache.entry.validate import Rejection
from kernelcache.host.toolchain import TvmFfiPaths
from kernelcache.key.deps import DepCheck
from kernelcache.lookup.loader import WarmResult

from kernelcache.storage.local import EntryInfo
from tests.support import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def _mypy(tmp_path: Path, code: str) -> str:
    src = tmp_path / "use.py"
    src.write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
                           "--cache-dir", str(tmp_path / ".mypy"), str(src)],
                          cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def test_type_checker_refuses_a_misspelt_or_mistyped_field(tmp_path):
    out = _mypy(tmp_path, """
        from pathlib import Path
        from kernelcache.base.settings import Settings
        from kernelcache.base.events import RejectCode
        from kernelcache.entry.validate import Rejection

        Settings(cache_dir=Path("c"), lock_dir=Path("l"), no_bulid=True)
        Settings(cache_dir=Path("c"), lock_dir=Path("l"), lock_timeout="soon")
        Rejection(RejectCode.DEPS)
        ok = Settings(cache_dir=Path("c"), lock_dir=Path("l"), no_build=True)
        same: Settings = ok.replace(rebuild=True)
    """)
    lines = out.splitlines()
    assert any(":7:" in ln and "no_bulid" in ln for ln in lines), out
    assert any(":8:" in ln and "lock_timeout" in ln for ln in lines), out
    assert any(":9:" in ln and "detail" in ln for ln in lines), out
    assert not [ln for ln in lines if ":10:" in ln or ":11:" in ln], out


def test_run_time_refuses_unknown_and_missing_fields(tmp_path):
    with pytest.raises(TypeError, match="no_bulid"):
        Settings(cache_dir=tmp_path, lock_dir=tmp_path, no_bulid=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="detail"):
        Rejection(RejectCode.DEPS)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        Settings(cache_dir=tmp_path, lock_dir=tmp_path).replace(no_bulid=True)


def test_fields_defaults_order_and_match(tmp_path):
    assert Settings._FIELDS[:4] == ("cache_dir", "lock_dir", "lock_timeout", "no_build")
    assert Settings.__match_args__ == Settings._FIELDS
    r = Rejection(RejectCode.DEPS, "header changed")
    assert r.mismatches is None and str(r) == "header changed"
    match r:
        case Rejection(code, detail):
            assert (code, detail) == (RejectCode.DEPS, "header changed")
    w = WarmResult("k", Status.HIT, 0.5)
    assert (w.reason, w.entry_id, w.error) == ("", "", None)
    assert repr(TvmFfiPaths("p", "i", "l", "1")) == "TvmFfiPaths(package_dir='p', include_dir='i', lib_path='l', version='1')"


def test_frozen_eq_hash(tmp_path):
    a = EntryInfo(tmp_path, "entries", "k", "abc", "e1", 10, 1.0)
    b = EntryInfo(tmp_path, "entries", "k", "abc", "e1", 10, 1.0)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != EntryInfo(tmp_path, "entries", "k", "abc", "e2", 10, 1.0)
    assert TvmFfiPaths("p", "i", "l", "1") != ("p", "i", "l", "1")
    with pytest.raises(FrozenInstanceError):
        a.size = 3  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del a.size


def test_records_cross_a_process_by_pickle(tmp_path):
    """What xdist and worker processes exchange: the same record on the other side."""
    s = Settings(cache_dir=tmp_path / "c", lock_dir=tmp_path / "l", no_build=True,
                 remote=RemoteSettings(url="file:///srv/kc", mode="readwrite"))
    sent = [s, Rejection(RejectCode.DEPS, "x", {"f": ("a", None)}), WarmResult("k", Status.BUILT, 1.0, "miss")]
    blob = tmp_path / "r.pkl"
    blob.write_bytes(pickle.dumps(sent))
    code = ("import pickle, sys; r = pickle.load(open(sys.argv[1], 'rb')); "
            "r[0].cache_dir.name == 'c' and r[0].remote.writable or sys.exit(3); "
            "sys.stdout.buffer.write(pickle.dumps(r))")
    proc = subprocess.run([sys.executable, "-c", code, str(blob)], cwd=ROOT, capture_output=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr.decode()
    back = pickle.loads(proc.stdout)
    assert back == sent and hash(back[0]) == hash(s)
    assert back[2].status is Status.BUILT and back[0].to_wire() == s.to_wire()


def test_a_default_factory_makes_one_value_per_record():
    a, b = DepCheck(True), DepCheck(True, n_stat=3)
    assert a.refreshed == {} and a.refreshed is not b.refreshed and (a.reason, b.n_stat) == ("", 3)
    assert DepCheck(False, "gone") == DepCheck(False, "gone") and DepCheck._FIELDS[0] == "ok"
