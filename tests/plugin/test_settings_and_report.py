"""Settings passed by value (no env writes around loads), deprecated option names, remote and
tvm_ffi options, per-kernel stats across xdist workers, the GitHub step summary."""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from tests.support import REPO

TESTS_DIR = REPO / "tests"
PLUGIN_DIR = REPO / "kernelcache" / "pytest_plugin"

ONE_TEST = "def test_x(): pass\n"


def _support():
    """tests/support.py (the tiny-kernel helpers)."""
    from tests import support

    return support


def _options(report: Path) -> dict:
    return json.loads(report.read_text())["session"]["options"]


# -- deprecated names -----------------------------------------------------------------------------
def test_deprecated_prebuild_names_still_work_and_warn(plain, monkeypatch):
    plain.makepyfile(test_x=ONE_TEST)
    report = plain.path / "r.json"
    args = ("-p", "kernelcache", f"--kc-report-json={report}")

    monkeypatch.setenv("KERNELCACHE_PREBUILD", "off")
    r = plain.runpytest_subprocess(*args)
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert _options(report)["warm"] == {"value": "off", "source": "env"}
    r.stdout.fnmatch_lines(["*PytestDeprecationWarning: KERNELCACHE_PREBUILD is deprecated; use KERNELCACHE_WARM*"])
    monkeypatch.delenv("KERNELCACHE_PREBUILD")

    r = plain.runpytest_subprocess(*args, "--kc-prebuild=controller")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert _options(report)["warm"] == {"value": "controller", "source": "cli"}
    r.stdout.fnmatch_lines(["*PytestDeprecationWarning: --kc-prebuild is deprecated; use --kc-warm*"])

    plain.makeini("[pytest]\nkernelcache_prebuild = off\n")
    r = plain.runpytest_subprocess(*args)
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert _options(report)["warm"] == {"value": "off", "source": "ini"}
    r.stdout.fnmatch_lines(["*PytestDeprecationWarning: ini kernelcache_prebuild is deprecated; use kernelcache_warm*"])

    # the new names win over the old ones and do not warn
    plain.makeini("[pytest]\nkernelcache_prebuild = off\nkernelcache_warm = controller\n")
    r = plain.runpytest_subprocess(*args)
    assert _options(report)["warm"] == {"value": "controller", "source": "ini"}
    monkeypatch.setenv("KERNELCACHE_WARM", "auto")
    plain.makeini("[pytest]\n")
    r = plain.runpytest_subprocess(*args)
    assert _options(report)["warm"] == {"value": "auto", "source": "env"}
    assert "DeprecationWarning" not in r.stdout.str()
    r = plain.runpytest_subprocess(*args, "--kc-warm=off")
    assert _options(report)["warm"] == {"value": "off", "source": "cli"}


# -- no environment writes around loads -----------------------------------------------------------
RECORDER = '''
import json, os
from pathlib import Path
from kernelcache.lookup import loader

LOG = Path(__file__).with_name("loads.jsonl")


def _kc_env():
    return {k: v for k, v in os.environ.items() if k.startswith("KERNELCACHE_")}


def _wrap(fn, kind):
    def wrapper(*args, **kwargs):
        s = kwargs.get("settings")
        with LOG.open("a") as f:
            f.write(json.dumps({"kind": kind, "env": _kc_env(),
                                "no_build": None if s is None else s.no_build}) + "\\n")
        return fn(*args, **kwargs)
    return wrapper


loader.load_with_result = _wrap(loader.load_with_result, "load")
loader.warm = _wrap(loader.warm, "warm")
'''


def test_no_env_writes_around_loads_and_the_marker_still_forbids_building(kcp, monkeypatch):
    """The environment during every load (warm, lazy, marker no_build=True) is the session's
    exported one; the marker's no_build reaches the loader as a Settings value."""
    monkeypatch.delenv("KERNELCACHE_NO_BUILD", raising=False)
    kcp.ini()
    kcp.pytester.makeconftest(RECORDER)
    kcp.pytester.makepyfile(test_k='''
        import os
        import pytest

        @pytest.mark.kernel("kc_add_a", no_build=True)
        def test_must_hit(kc_kernel):
            pass

        @pytest.mark.kernel("kc_add_b")
        def test_may_build(kc_kernel):
            assert os.environ["KERNELCACHE_NO_BUILD"] == "0"
            assert kc_kernel.sub(3, 1) == 2
    ''')
    r = kcp.run("-p", "kernelcache", "--kc-warm=off")
    r.assert_outcomes(passed=1, errors=1)
    assert "kernel 'kc_add_a' could not be loaded: CacheMissError" in r.stdout.str()
    assert kcp.compiles("add_a.cc") == 0 and kcp.compiles("add_b.cc") == 1
    calls = [json.loads(line) for line in (kcp.path / "loads.jsonl").read_text().splitlines()]
    assert sorted(c["no_build"] for c in calls if c["kind"] == "load") == [False, True]
    envs = [c["env"] for c in calls]
    assert all(e == envs[0] for e in envs), envs  # nothing changed between loads
    assert envs[0]["KERNELCACHE_NO_BUILD"] == "0" and envs[0]["KERNELCACHE_DIR"] == str(kcp.cache)

    # warmed by the controller under xdist: the same environment in the controller and workers
    (kcp.path / "loads.jsonl").unlink()
    r = kcp.run("-p", "xdist", "-n", "2", "-p", "kernelcache", "--kc-kernels=kc_add_b")
    calls = [json.loads(line) for line in (kcp.path / "loads.jsonl").read_text().splitlines()]
    assert {c["kind"] for c in calls} == {"warm", "load"}
    assert all(c["env"] == calls[0]["env"] for c in calls)


def test_export_is_restored_after_the_session(plain, monkeypatch):
    """In-process run: the exported KERNELCACHE_* variables are gone again afterwards."""
    plain.makepyfile(test_x='''
        import os
        def test_sees_export():
            assert os.environ["KERNELCACHE_NO_BUILD"] == "1"
            assert os.environ["KERNELCACHE_REMOTE_MODE"] == "off"
    ''')
    before = {k: v for k, v in os.environ.items() if k.startswith("KERNELCACHE_")}
    assert "KERNELCACHE_NO_BUILD" not in before
    r = plain.runpytest_inprocess("-p", "kernelcache", "--kc-no-build", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    assert {k: v for k, v in os.environ.items() if k.startswith("KERNELCACHE_")} == before


def _environ_writes(tree: ast.AST) -> list[tuple[str, int]]:
    """(enclosing function, line) of every os.environ mutation / os.putenv in a module."""
    out = []

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = child.targets if isinstance(child, (ast.Assign, ast.Delete)) else [child.target]
                if any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets):
                    out.append((fn, child.lineno))
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                f = child.func
                if (is_environ(f.value) and f.attr in ("pop", "update", "setdefault", "clear", "popitem")) \
                        or f.attr in ("putenv", "unsetenv"):
                    out.append((fn, child.lineno))
            visit(child, here)

    visit(tree, "<module>")
    return out


def test_only_the_export_function_writes_the_environment():
    writes = {}
    for p in sorted(PLUGIN_DIR.glob("*.py")):
        for fn, line in _environ_writes(ast.parse(p.read_text())):
            writes.setdefault(p.name, set()).add(fn)
    assert writes == {"settings_bridge.py": {"export_env", "restore_env"}}
    # and the checker does see writes
    assert _environ_writes(ast.parse("import os\ndef f():\n    os.environ['A'] = '1'\n")) == [("f", 3)]


# -- remote and tvm_ffi options -----------------------------------------------------------------
def test_remote_options_reach_settings_and_bad_mode_is_a_usage_error(plain, monkeypatch, tmp_path):
    plain.makepyfile(test_x='''
        import os
        def test_export():
            print("MODE=" + os.environ["KERNELCACHE_REMOTE_MODE"], "URL=" + os.environ["KERNELCACHE_REMOTE"])
    ''')
    report = plain.path / "r.json"
    url = (tmp_path / "fleet").as_uri()
    r = plain.runpytest_subprocess("-p", "kernelcache", "-s", f"--kc-report-json={report}",
                                   f"--kc-remote={url}", "--kc-remote-mode=readwrite")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    s = json.loads(report.read_text())["session"]["settings"]
    assert (s["remote"], s["remote_mode"]) == (url, "readwrite")
    assert f"MODE=readwrite URL={url}" in r.stdout.str()
    r.stdout.fnmatch_lines([f"kernelcache *remote={url} (readwrite)*"])
    # a remote without a mode reads (the Settings default), from the ini too
    plain.makeini(f"[pytest]\nkernelcache_remote = {url}\n")
    r = plain.runpytest_subprocess("-p", "kernelcache", f"--kc-report-json={report}")
    s = json.loads(report.read_text())["session"]["settings"]
    assert (s["remote"], s["remote_mode"]) == (url, "read")

    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-remote-mode", "bogus")
    assert r.ret == 4
    assert "--kc-remote-mode: invalid choice: 'bogus' (choose from read, readwrite, off)" in r.stderr.str() \
        or "--kc-remote-mode: invalid choice: 'bogus' (choose from 'read', 'readwrite', 'off')" in r.stderr.str()
    monkeypatch.setenv("KERNELCACHE_REMOTE_MODE", "bogus")
    r = plain.runpytest_subprocess("-p", "kernelcache")
    assert r.ret == 4
    assert "kernelcache: env KERNELCACHE_REMOTE_MODE must be one of read/readwrite/off, got 'bogus'" in r.stderr.str()
    monkeypatch.delenv("KERNELCACHE_REMOTE_MODE")
    plain.makeini("[pytest]\nkernelcache_remote_mode = sometimes\n")
    r = plain.runpytest_subprocess("-p", "kernelcache")
    assert r.ret == 4
    assert "kernelcache: ini kernelcache_remote_mode must be one of read/readwrite/off" in r.stderr.str()


def test_patch_tvm_ffi_routes_load_inline_through_the_cache(kcp):
    """--kc-patch-tvm-ffi installs the drop-in for the session: a third-party load_inline
    kernel inside a test is built by kernelcache and shows in the summary."""
    pytest.importorskip("kernelcache.tvm_ffi")
    kcp.pytester.makepyfile(test_jit='''
        import tvm_ffi.cpp
        from kernelcache import tvm_ffi as dropin

        SRC = "#include <cstdint>\\nint64_t triple(int64_t a) { return 3 * a; }"

        def test_routed():
            assert dropin.is_installed()
            mod = tvm_ffi.cpp.load_inline("kc_triple", cpp_sources=SRC, functions=["triple"])
            assert mod.triple(5) == 15
    ''')
    r = kcp.run("-p", "kernelcache", "--kc-patch-tvm-ffi", "-p", "no:cacheprovider")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines(["kc_triple *built*test*"])
    r = kcp.run("-p", "kernelcache", "-p", "no:cacheprovider", "-k", "test_routed")
    assert r.ret == 1  # without the option nothing is patched


# -- per-kernel stats across workers, GitHub step summary -------------------------------------------
LAZY_TESTS = '''
import importlib.util
import sys
import time
from pathlib import Path

import pytest
import kernelcache as kc

_spec = importlib.util.spec_from_file_location("kc_test_support", {support!r})
_conf = sys.modules["kc_test_support"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conf)
SPEC = _conf.project_spec(Path({project!r}), name="lazy_adder")


@pytest.mark.parametrize("i", range(6))
def test_lazy(i):
    assert kc.load(SPEC).add(i, 1) == i + 1
    time.sleep(0.1)
'''


def test_kernel_loaded_only_inside_tests_appears_per_kernel_under_xdist(kcp, monkeypatch):
    project = _support().make_project(kcp.path / "lazyproj")
    kcp.ini()
    kcp.pytester.makepyfile(test_lazy=LAZY_TESTS.format(support=str(TESTS_DIR / "support.py"),
                                                         project=str(project)))
    summary = kcp.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = kcp.path / "r.json"
    r = kcp.run("-p", "xdist", "-n", "2", "-p", "kernelcache", f"--kc-report-json={report}")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.assert_outcomes(passed=6)
    assert kcp.compiles("add.cc") == 1
    row = next(line.split() for line in r.stdout.lines if line.startswith("lazy_adder "))
    assert row[1] == "built" and row[3] == "test"
    data = json.loads(report.read_text())
    k = {k["name"]: k for k in data["kernels"]}["lazy_adder"]
    assert k["stats"]["builds"] == 1 and k["status"] == "built"
    assert all(t["kernels"] == ["lazy_adder"] for t in data["tests"]), data["tests"]  # loaded in the test body
    workers = data["stats"]["workers"]
    assert sorted(workers) == ["gw0", "gw1"]
    per_worker = [w.get("kernels", {}).get("lazy_adder", {}) for w in workers.values()]
    assert sum(p.get("builds", 0) for p in per_worker) == 1
    assert data["stats"]["total"]["kernels"]["lazy_adder"]["hits"] == sum(p.get("hits", 0) for p in per_worker) >= 1
    # GitHub step summary: appended, as a Markdown table with the same row
    md = summary.read_text()
    assert md.startswith("earlier step\n")
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| kernel | status |"))
    assert set(lines[head + 1].replace("|", "").replace(":", "")) == {"-"}
    cells = next(line for line in lines if line.startswith("| lazy_adder |")).strip("|").split("|")
    assert [c.strip() for c in cells][:4] == ["lazy_adder", "built", f"{k['seconds']:.2f}", "test"]
    assert "totals: 1 kernel(s); builds 1" in md


def test_a_lazily_loaded_kernel_whose_build_fails_reports_its_build_time_and_the_test(kcp):
    """Issue 46: a failed build in a test body showed 0.00 s and the test's record named no kernel."""
    project = _support().make_project(kcp.path / "lazyproj")
    src = project / "add.cc"
    src.write_text(src.read_text().replace("return a + b", "return a +* b;;; oops"))
    kcp.ini()
    kcp.pytester.makepyfile(test_lazy=LAZY_TESTS.format(support=str(TESTS_DIR / "support.py"),
                                                         project=str(project)).replace("range(6)", "range(1)"))
    report = kcp.path / "r.json"
    r = kcp.run("-p", "kernelcache", f"--kc-report-json={report}")
    r.assert_outcomes(failed=1)
    data = json.loads(report.read_text())
    k = {k["name"]: k for k in data["kernels"]}["lazy_adder"]
    assert k["status"] == "failed" and k["stats"]["build_failures"] == 1, k
    assert k["seconds"] > 0, k  # the failed compile's time, not 0.00
    assert k["reason"].startswith("miss:"), k
    (t,) = data["tests"]
    assert t["kernels"] == ["lazy_adder"] and t["outcome"] == "failed", t


def test_a_miss_reads_alike_for_a_warmed_and_a_lazily_loaded_kernel(kcp):
    """Issue 46, "two words for one miss": the same miss (no entry) read "no cached entry for this
    kernel" in a warmed row and "miss: no_entry" in a lazily loaded one, in the summary and JSON."""
    project = _support().make_project(kcp.path / "lazyproj")
    kcp.ini()
    kcp.pytester.makepyfile(test_lazy=LAZY_TESTS.format(support=str(TESTS_DIR / "support.py"),
                                                         project=str(project)).replace("range(6)", "range(1)"))
    report = kcp.path / "r.json"
    r = kcp.run("-p", "kernelcache", "--kc-kernels=kc_add_a", f"--kc-report-json={report}")
    r.assert_outcomes(passed=1)
    rows = {k["name"]: k for k in json.loads(report.read_text())["kernels"]}
    assert (rows["kc_add_a"]["where"], rows["lazy_adder"]["where"]) == ("controller", "test")
    assert rows["kc_add_a"]["reason"] == "miss: no_entry (no cached entry for this kernel)", rows["kc_add_a"]
    assert rows["lazy_adder"]["reason"] == "miss: no_entry", rows["lazy_adder"]
    r.stdout.fnmatch_lines_random(["kc_add_a *built*controller*miss: no_entry (no cached entry for this kernel)",
                                   "lazy_adder *built*test*miss: no_entry"])


def test_step_summary_not_written_without_the_variable(kcp_shared):
    kcp_shared.ini()
    kcp_shared.pytester.makepyfile(test_x=ONE_TEST)
    r = kcp_shared.run("-p", "kernelcache")
    assert r.ret == 0
    assert not list(kcp_shared.path.glob("*.md"))


# -- ci/rerun-test needs no pytest --------------------------------------------------------------------
def test_rerun_test_plans_without_pytest_installed(tmp_path):
    """The planning job of a /rerun-test workflow may run on a bare machine: name resolution and
    the suite table import no pytest."""
    import subprocess
    import sys

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "pytest.py").write_text("raise ImportError('pytest is not installed here')\n")
    p = subprocess.run([sys.executable, str(REPO / "ci" / "rerun-test"), "--format", "json",
                        "test_rerun_by_name.py"], capture_output=True, text=True, timeout=60, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(blocker)})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["groups"][0]["tests"][0]["path"] == "tests/plugin/test_rerun_by_name.py"


def _summary(r: pytest.RunResult) -> tuple[list[str], dict[str, str]]:
    """The summary table's header words and {kernel: its row line}."""
    lines = r.stdout.lines
    i = next(n for n, line in enumerate(lines) if line.startswith("kernel ") and " status " in line)
    header = lines[i]
    rows = {}
    for line in lines[i + 1:]:
        if line.startswith("totals:"):
            break
        rows[line.split()[0]] = line
    return header, rows


def test_fleet_cache_columns_appear_only_with_remote_activity(kcp, tmp_path):
    """An unreachable remote: remote errors with their reason. readwrite: a remote miss (with its
    reason) and an upload. A fresh local cache then gets a remote hit. Without remote activity
    the remote columns are not shown."""
    kcp.ini()
    kcp.pytester.makepyfile(test_k=USES_A_ONLY)
    fleet = tmp_path / "fleet"
    url = fleet.as_uri()
    report = kcp.path / "r.json"

    def run(cache: str, *args: str) -> tuple[str, dict[str, str]]:
        r = kcp.run("-p", "kernelcache", f"--kc-cache-dir={kcp.path / cache}", f"--kc-report-json={report}", *args)
        assert r.ret == 0, r.stdout.str() + r.stderr.str()
        return _summary(r)

    header, rows = run("cache-a", f"--kc-remote={url}")  # the directory does not exist yet
    assert "remote errors" in header and "uploads" not in header
    assert "(remote_unavailable:" in rows["kc_add_a"]

    fleet.mkdir()
    header, rows = run("cache-b", f"--kc-remote={url}", "--kc-remote-mode=readwrite")
    assert "remote misses" in header and "uploads" in header and "remote hits" not in header
    assert "1 (remote_no_entry:1)" in rows["kc_add_a"]
    stats = {k["name"]: k for k in json.loads(report.read_text())["kernels"]}["kc_add_a"]["stats"]
    assert stats["uploads"] == 1 and stats["reasons"]["remote_misses:remote_no_entry"] == 1

    header, rows = run("cache-c", f"--kc-remote={url}")
    assert "remote hits" in header and "uploads" not in header
    assert rows["kc_add_a"].split()[1] == "remote"
    assert kcp.compiles("add_a.cc") == 2  # built for cache-a and cache-b; cache-c fetched it

    header, rows = run("cache-c")  # no remote: the narrow table
    assert "remote" not in header and rows["kc_add_a"].split()[1] == "hit"


USES_A_ONLY = '''
import pytest

@pytest.mark.kernel("kc_add_a")
def test_a(kc_kernel):
    assert kc_kernel.add(40, 2) == 42
'''
