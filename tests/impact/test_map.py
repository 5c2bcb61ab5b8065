"""The impact map file: round trip, and every way it can be unusable (with the reason)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kernelcache.impact.api import load_checked
from kernelcache.impact.impact_map import (
    FORMAT,
    FileRecord,
    ImpactMap,
    KernelRecord,
    SetupRecord,
    TestRecord,
    load,
    save,
)


def sample() -> ImpactMap:
    m = ImpactMap(commit="a" * 40, rootdir="")
    a = "a" * 40
    m.kernels["k"] = KernelRecord("k", "csrc", ["csrc/k.cc"], [], ["kspecs.py"], True, "e1", a)
    m.tests["tests/test_x.py::t"] = TestRecord("tests/test_x.py::t", "tests/test_x.py", ["k"], "passed", 0.5, commit=a)
    m.tests["tests/test_y.py::t"] = TestRecord("tests/test_y.py::t", "tests/test_y.py", [], "skipped", 0.0, True,
                                               commit=a)
    m.files["tests/test_x.py"] = FileRecord(["data/d.json"], ["data"], ["k"], [a])
    m.dirty = {a: ["data/d.json"]}
    return m


def test_round_trip(tmp_path):
    p = tmp_path / "m.json"
    save(p, sample())
    m, why = load(p)
    assert why == "" and m.to_dict() == {**sample().to_dict(), "created": m.created}
    assert m.tests["tests/test_y.py::t"].early_skip and m.kernels["k"].inputs == ["csrc/k.cc"]


@pytest.mark.parametrize("content,why", [
    (None, "no impact map at"),
    ("{not json", "is corrupt"),
    ("[]", "not a kernelcache impact map"),
    (json.dumps({"kind": "kernelcache-impact-map", "format": FORMAT - 1}), "an old map"),
    (json.dumps({"kind": "kernelcache-impact-map", "format": FORMAT, "tests": {"x": 3}}), "malformed"),
    (json.dumps({"kind": "kernelcache-impact-map", "format": FORMAT, "tests": []}), "malformed"),
])
def test_unusable_maps_say_why(tmp_path, content, why):
    p = tmp_path / "m.json"
    if content is not None:
        p.write_text(content)
    m, problem = load(p)
    assert m is None and why in problem


def test_a_map_from_a_commit_this_clone_lacks_is_stale(tmp_path):
    r = tmp_path / "r"
    r.mkdir()
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    p = tmp_path / "m.json"
    save(p, sample())  # commit aaaa... does not exist here
    m, problem = load_checked(r, p, "")
    assert m is None and "which this clone does not have" in problem


def test_merge_keeps_tests_that_did_not_run_and_drops_deleted_files():
    old = sample()
    b = "b" * 40
    new = ImpactMap(commit=b)
    new.tests["tests/test_x.py::t"] = TestRecord("tests/test_x.py::t", "tests/test_x.py", [], "failed", commit=b)
    new.files["tests/test_x.py"] = FileRecord([], [], [], [b])
    merged = new.merged_into(old, existing={"tests/test_x.py"})
    assert set(merged.tests) == {"tests/test_x.py::t"}  # test_y.py no longer exists
    assert merged.tests["tests/test_x.py::t"].outcome == "failed"
    assert merged.files["tests/test_x.py"].reads == ["data/d.json"]  # united: other tests may read it
    # provenance: the united file record keeps both commits, the kept kernel record its own
    assert merged.files["tests/test_x.py"].commits == ["a" * 40, b]
    assert merged.kernels["k"].commit == "a" * 40 and merged.commit == b
    assert merged.record_commits() == {"a" * 40, b} and merged.dirty == {"a" * 40: ["data/d.json"]}
    kept = new.merged_into(old, existing=None)
    assert kept.tests["tests/test_y.py::t"].early_skip


def test_kernelcaches_own_pre_included_header_is_a_kernel_input_where_the_repository_holds_it() -> None:
    """Every exporting tvm-ffi source reads kernelcache's schema-export header (recorded as
    ``${KERNELCACHE}/...``): in this repository an edit to it must select the kernels' tests."""
    from types import SimpleNamespace

    from kernelcache.host.anchors import PACKAGE_DIR

    from kernelcache.impact.record import RepoPaths, kernel_record

    repo_root = Path(PACKAGE_DIR).parent
    header = "kernelcache/csrc/tvm_ffi_schema_export.h"
    assert (repo_root / header).is_file()
    manifest = SimpleNamespace(source_hashes={}, entry_id="e1", absent=[], deps=[
        {"path": "${KERNELCACHE}/csrc/tvm_ffi_schema_export.h"}, {"path": "${TVM_FFI}/include/tvm/ffi/function.h"}])
    rec = kernel_record("k", RepoPaths(repo_root, [header]), None, [], manifest, [])
    assert rec.inputs == [header]  # the package's header; tvm-ffi's stays the environment's


def _with_fixture(commit: str, reads: list[str], ran: list[str]) -> ImpactMap:
    m = ImpactMap(commit=commit)
    for n in ran:
        m.tests[n] = TestRecord(n, n.split("::")[0], commit=commit, fixtures=["tests::f"])
    m.fixtures["tests::f"] = SetupRecord(reads, [], [], "", [commit])
    m.conftests["tests/conftest.py"] = SetupRecord(reads, [], [], "", [commit])
    m.conftests["old/conftest.py"] = SetupRecord(reads, [], [], "", [commit])
    return m


def test_merge_unites_a_fixture_record_unless_every_test_using_it_ran():
    """Issue 38: a session that ran only some users of a fixture (say with one parameter of it)
    keeps the old record's reads; one that ran every user replaces it. A conftest record is
    replaced; one whose conftest is gone leaves."""
    a, b = "a" * 40, "b" * 40
    old = _with_fixture(a, ["data/x"], ["tests/test_1.py::t", "tests/test_2.py::t"])
    existing = {"tests/conftest.py", "tests/test_1.py", "tests/test_2.py"}  # old/conftest.py is gone
    part = _with_fixture(b, ["data/y"], ["tests/test_1.py::t"]).merged_into(old, existing, {"tests/test_1.py"})
    assert part.fixtures["tests::f"].reads == ["data/x", "data/y"] and part.fixtures["tests::f"].commits == [a, b]
    assert part.conftests == {"tests/conftest.py": SetupRecord(["data/y"], [], [], "", [b]),
                              "old/conftest.py": SetupRecord(["data/y"], [], [], "", [b])}  # recorded now
    full = _with_fixture(b, ["data/y"], ["tests/test_1.py::t", "tests/test_2.py::t"])
    del full.conftests["old/conftest.py"]
    full = full.merged_into(old, existing, {"tests/test_1.py", "tests/test_2.py"})
    assert full.fixtures["tests::f"].reads == ["data/y"] and set(full.conftests) == {"tests/conftest.py"}
    assert full.record_commits() == {b}


def test_declared_inputs_lines():
    from kernelcache.impact.setups import declared_for, parse_declared

    got = parse_declared(["tests/test_cli.py::* = csrc/*.h data/x.json", "", "# a comment"])
    assert declared_for("tests/test_cli.py::test_a", got) == ["csrc/*.h", "data/x.json"]
    assert declared_for("tests/test_other.py::test_a", got) == []
    with pytest.raises(ValueError, match="TEST-ID-GLOB = INPUT-PATTERN"):
        parse_declared(["tests/test_cli.py::*"])
