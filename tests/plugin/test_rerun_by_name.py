"""Acceptance 3: --kc-run name resolution (plugin) and ci/rerun-test grouping / JSON / --exec."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcache.pytest_plugin import gating, names

REPO = Path(__file__).resolve().parents[2]
RERUN = REPO / "ci" / "rerun-test"

SUITES = """
default_runner = "cpu"
pytest_args = ["-p", "no:cacheprovider"]

[runners.cpu]
runs_on = "ubuntu-latest"
gpus = 0
pytest_args = ["-q"]

[runners.gpu-h200]
runs_on = "h200"
gpus = 1
pytest_args = ["-q", "-rs"]

[suites.unit]
runner = "cpu"
files = ["tests/a/*", "tests/b/*"]

[suites.kernels-gpu]
runner = "gpu-h200"
"""


@pytest.fixture
def tree(plain):
    plain.makeini("[pytest]\ntestpaths = tests\n")
    files = {
        "tests/a/test_alpha.py": "def test_alpha_a(): pass\n",
        "tests/b/test_alpha.py": "def test_alpha_b(): pass\n",
        "tests/a/test_unique.py": (
            "class TestX:\n"
            "    def test_y(self): pass\n"
            "    def test_z(self): pass\n"
            "def test_free(): pass\n"),
        "tests/gpu/test_cuda_thing.py": (
            "import pytest\n"
            "pytestmark = [pytest.mark.suite('kernels-gpu')]\n"
            "@pytest.mark.gpu(min_arch='9.0')\n"
            "def test_on_gpu(): pass\n"
            "@pytest.mark.suite('unit', runner='cpu')\n"
            "def test_cpu_side(): pass\n"),
        "ci/suites.toml": SUITES,
    }
    for rel, text in files.items():
        p = plain.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return plain


def test_unique_name_runs_only_that_file(tree):
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "test_unique.py", "-v")
    assert r.ret == 0
    r.assert_outcomes(passed=3)
    r.stdout.fnmatch_lines(["tests/a/test_unique.py::TestX::test_y PASSED*"])


def test_ambiguous_name_is_a_usage_error_listing_matches(tree):
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "test_alpha.py")
    assert r.ret == 4
    r.stderr.fnmatch_lines([
        "*cannot resolve 'test_alpha.py': 'test_alpha.py' is ambiguous: it matches 2 files*",
        "*tests/a/test_alpha.py",
        "*tests/b/test_alpha.py",
    ])
    # a path suffix disambiguates
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "b/test_alpha.py", "-v")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["tests/b/test_alpha.py::test_alpha_b PASSED*"])


def test_unknown_name_is_a_usage_error(tree):
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "test_unique.py", "test_nothere.py")
    assert r.ret == 4
    r.stderr.fnmatch_lines(["*cannot resolve 'test_nothere.py': no test file matches 'test_nothere.py' under tests*"])


def test_class_and_test_selectors_with_and_without_xdist(tree):
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "test_unique.py::TestX::test_y", "-v")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["tests/a/test_unique.py::TestX::test_y PASSED*"])
    # unittest style Class.method
    r = tree.runpytest_subprocess("-p", "kernelcache", "--kc-run", "test_unique.py::TestX.test_z", "-v")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["tests/a/test_unique.py::TestX::test_z PASSED*"])
    # under xdist the workers resolve the same names to the same tests
    r = tree.runpytest_subprocess("-p", "xdist", "-n", "2", "-p", "kernelcache",
                                  "--kc-run", "test_unique.py::TestX", "a/test_alpha.py")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.assert_outcomes(passed=3)


def test_kc_run_needs_the_plugin(tree):
    r = tree.runpytest_subprocess("--kc-run", "test_unique.py")
    assert r.ret == 4
    assert "add -p kernelcache" in r.stderr.str()


def _rerun(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, str(RERUN), "--root", str(root), *args], capture_output=True,
                          text=True, timeout=120, cwd=root, env={**os.environ, **(env or {})})


def test_rerun_test_groups_by_runner_text_and_json(tree):
    p = _rerun(tree.path, "test_unique.py::TestX.test_y", "test_cuda_thing.py", "b/test_alpha.py",
               "test_cuda_thing.py::test_cpu_side")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    cmds = [line for line in lines if not line.startswith("#")]
    # test_cuda_thing.py sits on both runners: its CPU test goes to cpu (once, though named twice),
    # the rest to gpu-h200, whose plugin deselects the CPU test (--kc-placed).
    assert cmds == [
        "python -m pytest -p kernelcache -p no:cacheprovider -q --kc-run tests/a/test_unique.py::TestX::test_y "
        "tests/gpu/test_cuda_thing.py::test_cpu_side tests/b/test_alpha.py",
        "python -m pytest -p kernelcache -p no:cacheprovider -q -rs --kc-runner=gpu-h200 "
        "--kc-placed=tests/gpu/test_cuda_thing.py::test_cpu_side=cpu --kc-run tests/gpu/test_cuda_thing.py",
    ]
    assert "# runner gpu-h200 (runs-on: h200): 1 test(s)" in lines

    j = _rerun(tree.path, "--format", "json", "test_unique.py::TestX.test_y", "test_cuda_thing.py",
               "test_cuda_thing.py::test_cpu_side")
    doc = json.loads(j.stdout)
    by_runner = {g["runner"]: g for g in doc["groups"]}
    assert set(by_runner) == {"cpu", "gpu-h200"}
    gpu = by_runner["gpu-h200"]
    assert gpu["runs_on"] == "h200"
    assert gpu["tests"] == [{"spec": "test_cuda_thing.py", "path": "tests/gpu/test_cuda_thing.py", "selector": "",
                             "nodeid": "tests/gpu/test_cuda_thing.py", "stage": "kernels-gpu",
                             "runner": "gpu-h200", "source": "marker:module",
                             "placed": {"tests/gpu/test_cuda_thing.py::test_cpu_side": "cpu"}}]
    cpu_tests = {t["nodeid"]: t for t in by_runner["cpu"]["tests"]}
    assert cpu_tests["tests/a/test_unique.py::TestX::test_y"]["source"] == "table"
    assert cpu_tests["tests/gpu/test_cuda_thing.py::test_cpu_side"]["source"] == "marker:test_cpu_side"
    assert by_runner["cpu"]["argv"][-3:] == ["--kc-run", "tests/a/test_unique.py::TestX::test_y",
                                              "tests/gpu/test_cuda_thing.py::test_cpu_side"]


def test_rerun_test_errors_exit_2_with_matches(tree):
    p = _rerun(tree.path, "test_alpha.py")
    assert p.returncode == 2
    assert "ambiguous" in p.stderr and "tests/a/test_alpha.py" in p.stderr and "tests/b/test_alpha.py" in p.stderr
    j = _rerun(tree.path, "--format", "json", "test_alpha.py", "test_zzz.py")
    assert j.returncode == 2
    doc = json.loads(j.stdout)
    assert [pr["spec"] for pr in doc["problems"]] == ["test_alpha.py", "test_zzz.py"]
    assert doc["problems"][0]["matches"] == ["tests/a/test_alpha.py", "tests/b/test_alpha.py"]


def test_rerun_test_exec_runs_this_machines_group(tree, smi):
    names = ("test_unique.py", "test_cuda_thing.py")
    p = _rerun(tree.path, "--exec", *names, env={"KERNELCACHE_RUNNER": "cpu"})
    assert p.returncode == 0, p.stdout + p.stderr
    # test_unique.py's 3 and test_cuda_thing.py's CPU test
    assert "4 passed" in p.stdout and "running the 'cpu' group (KERNELCACHE_RUNNER)" in p.stderr
    # Detected: a machine whose nvidia-smi lists one sm_90 GPU is the gpu-h200 runner.
    smi(["0, NVIDIA H200, 9.0, 143771, GPU-1234"])
    p = _rerun(tree.path, "--exec", *names)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "running the 'gpu-h200' group (detected 1 GPU(s))" in p.stderr
    # only the GPU test (its CPU neighbour ran on cpu); the plugin saw the same GPU
    assert "1 passed, 1 deselected" in p.stdout and "skipped" not in p.stdout
    # A failing group's exit status is rerun-test's.
    (tree.path / "tests" / "a" / "test_unique.py").write_text("def test_free(): assert False\n")
    p = _rerun(tree.path, "--exec", "test_unique.py", env={"KERNELCACHE_RUNNER": "cpu"})
    assert p.returncode == 1


# -- name resolution / marker reading / gpu requirements: pure functions, no pytest run (pure functions, no pytest run) --------------------------------------
@pytest.mark.parametrize("spec, expected", [
    ("test_x.py", ("test_x.py", "")),
    ("test_x.py::TestX::test_y", ("test_x.py", "TestX::test_y")),
    ("test_x.py::TestX.test_y", ("test_x.py", "TestX::test_y")),
    ("test_x.py TestX.test_y", ("test_x.py", "TestX::test_y")),
    ("test_x.py::test_p[1.5-a]", ("test_x.py", "test_p[1.5-a]")),
])
def test_split_spec(spec, expected):
    assert names.split_spec(spec) == expected


def test_read_suite_markers_ignores_comments_and_strings(tmp_path):
    f = tmp_path / "test_m.py"
    f.write_text(
        "import pytest\n"
        "# pytestmark = pytest.mark.suite('commented', 'nope')\n"
        "DOC = \"pytest.mark.suite('in-a-string')\"\n"
        "pytestmark = pytest.mark.suite(stage='s1', runner='r1')\n"
        "@pytest.mark.suite('s2')\n"
        "class TestA:\n"
        "    @pytest.mark.suite('s3', 'r3')\n"
        "    def test_b(self): pass\n")
    assert names.read_suite_markers(f) == {"": ("s1", "r1"), "TestA": ("s2", None), "TestA::test_b": ("s3", "r3")}


@pytest.mark.parametrize("hw, count, arch, expected", [
    ("cpu", 1, None, "needs 1 GPU: no GPU found (--kc-hardware=cpu)"),
    ("1x9.0", 2, None, "needs 2 GPUs: found only 1"),
    ("2x8.0", 1, "9.0", "needs 1 GPU with arch >= 9.0: GPU arch too old (found 8.0, 8.0)"),
    ("8.0", 2, "sm_90", "needs 2 GPUs with arch >= sm_90: found 1 GPU (arch 8.0)"),
    ("8.0,9.0a", 1, "9.0", None),
    ("2x10.0", 2, 9.0, None),
])
def test_gpu_requirement_problem(hw, count, arch, expected):
    assert gating.requirement_problem(gating.parse_hardware(hw), count, arch) == expected


def test_failed_from_a_previous_report_reruns_exactly_the_failures(plain):
    plain.makepyfile(test_mix="""
        import os
        def test_ok(): pass
        def test_broken(): assert os.environ.get("FIXED") == "1"
        class TestK:
            def test_also_broken(self): assert os.environ.get("FIXED") == "1"
    """)
    report = plain.path / "first.json"
    r = plain.runpytest_subprocess("-p", "kernelcache", f"--kc-report-json={report}")
    r.assert_outcomes(passed=1, failed=2)
    r = plain.runpytest_subprocess("-p", "kernelcache", f"--kc-failed-from={report}", "-v")
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["kernelcache: --kc-failed-from *first.json: 2 test(s) that failed or errored there: "
                            "test_mix.py::test_broken, test_mix.py::TestK::test_also_broken",
                            "*test_mix.py::test_broken FAILED*", "*test_mix.py::TestK::test_also_broken FAILED*"])
    assert "test_ok" not in r.stdout.str()
    clean = plain.path / "clean.json"
    plain.runpytest_subprocess("-p", "kernelcache", "-k", "test_ok", f"--kc-report-json={clean}")
    r = plain.runpytest_subprocess("-p", "kernelcache", f"--kc-failed-from={clean}")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "records no failed tests" in r.stderr.str()
