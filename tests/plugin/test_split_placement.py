"""Issue 45 item 3: a test file whose tests sit on several runners is listed on each of them,
and each runner's pytest runs only the tests placed on it.

Everything is real: a git repository made here, the real ``ci/affected-tests`` and
``ci/rerun-test`` in subprocesses, pytest (with the plugin) run by their ``--exec``, and an
``nvidia-smi`` stand-in on PATH for the GPU runner. Each test appends its name to a log, so a
test run twice or on the wrong runner shows up as a count, not as a guess from pytest's summary.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AFFECTED = REPO / "ci" / "affected-tests"
RERUN = REPO / "ci" / "rerun-test"

SUITES = """
default_runner = "cpu"
pytest_args = ["-p", "no:cacheprovider", "-p", "no:randomly"]

[runners.cpu]
runs_on = "ubuntu-latest"
gpus = 0
pytest_args = ["-p", "xdist", "-n", "2"]   # as ci/suites.toml: every xdist worker deselects alike

[runners.gpu-h200]
runs_on = "h200"
gpus = 1
pytest_args = ["--kc-require-gpu"]
"""

LOG = """\
import os


def ran(name):
    with open(os.environ["SPLIT_LOG"], "a") as f:
        f.write(name + "\\n")
"""

# The file of the issue: a CPU test and one suite-marked GPU test.
FI_ACT = """\
import pytest
from ranlog import ran


def test_cpu():
    ran("fi_act::test_cpu")


@pytest.mark.suite("fi-gpu", "gpu-h200")
@pytest.mark.gpu
def test_gpu():
    ran("fi_act::test_gpu")
"""

# Nesting (a CPU test inside a GPU class) and a name that pytest's own --deselect, a string
# prefix, would take for test_gpu's.
NESTED = """\
import pytest
from ranlog import ran


@pytest.mark.suite("fi-gpu", "gpu-h200")
class TestMixed:
    @pytest.mark.gpu
    @pytest.mark.parametrize("n", [1, 2])
    def test_on_gpu(self, n):
        ran(f"nested::TestMixed::test_on_gpu[{n}]")

    @pytest.mark.suite("unit", runner="cpu")
    def test_back_on_cpu(self):
        ran("nested::TestMixed::test_back_on_cpu")


@pytest.mark.suite("fi-gpu", "gpu-h200")
@pytest.mark.gpu
def test_gpu():
    ran("nested::test_gpu")


def test_gpu_extra():
    ran("nested::test_gpu_extra")
"""

# Every test on the GPU runner through per-test markers: the CPU runner has nothing to start.
GPU_ONLY = """\
import pytest
from ranlog import ran


@pytest.mark.suite("fi-gpu", "gpu-h200")
@pytest.mark.gpu
def test_a():
    ran("gpu_only::test_a")


@pytest.mark.suite("fi-gpu", "gpu-h200")
@pytest.mark.gpu
def test_b():
    ran("gpu_only::test_b")
"""

CPU_TESTS = ["fi_act::test_cpu", "nested::TestMixed::test_back_on_cpu", "nested::test_gpu_extra"]
GPU_TESTS = ["fi_act::test_gpu", "nested::TestMixed::test_on_gpu[1]", "nested::TestMixed::test_on_gpu[2]",
             "nested::test_gpu", "gpu_only::test_a", "gpu_only::test_b"]


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def repo(plain, monkeypatch):
    root = plain.path
    plain.makeini("[pytest]\ntestpaths = tests\npythonpath = tests\n")
    files = {
        "tests/ranlog.py": LOG,
        "tests/test_fi_act.py": FI_ACT,
        "tests/test_nested.py": NESTED,
        "tests/test_gpu_only.py": GPU_ONLY,
        "ci/suites.toml": SUITES,
        ".gitignore": "runs.log\n__pycache__/\nkc-*/\ngpu-bin/\nnogpu-bin/\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "tests")
    monkeypatch.setenv("SPLIT_LOG", str(root / "runs.log"))
    return root


def _run(script: Path, root: Path, *args: str, runner: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if runner:
        env["KERNELCACHE_RUNNER"] = runner
    return subprocess.run([sys.executable, str(script), "--root", str(root), *args], capture_output=True,
                          text=True, timeout=300, cwd=root, env=env)


def _ran(root: Path) -> list[str]:
    log = root / "runs.log"
    out = sorted(log.read_text().split()) if log.exists() else []
    log.unlink(missing_ok=True)
    return out


def test_affected_tests_lists_a_file_on_every_runner_its_tests_sit_on(repo, smi):
    p = _run(AFFECTED, repo, "--since", "HEAD", "--format", "json")
    assert p.returncode == 0, p.stderr
    groups = {g["runner"]: g for g in json.loads(p.stdout)["groups"]}
    assert set(groups) == {"cpu", "gpu-h200"}
    assert sorted(groups["cpu"]["files"]) == ["tests/test_fi_act.py", "tests/test_nested.py"]
    assert sorted(groups["gpu-h200"]["files"]) == ["tests/test_fi_act.py", "tests/test_gpu_only.py",
                                                   "tests/test_nested.py"]
    assert groups["gpu-h200"]["runs_on"] == "h200"

    # Each runner's --exec runs exactly its own tests, once.
    p = _run(AFFECTED, repo, "--since", "HEAD", "--exec", runner="cpu")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _ran(repo) == sorted(CPU_TESTS)
    smi(["0, NVIDIA H200, 9.0, 143771, GPU-1234"])
    p = _run(AFFECTED, repo, "--since", "HEAD", "--exec", runner="gpu-h200")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _ran(repo) == sorted(GPU_TESTS)


def test_rerun_test_by_file_name_gets_every_runner_and_by_node_id_only_its_own(repo, smi):
    p = _run(RERUN, repo, "--format", "json", "test_fi_act.py")
    assert p.returncode == 0, p.stderr
    groups = {g["runner"]: g for g in json.loads(p.stdout)["groups"]}
    assert set(groups) == {"cpu", "gpu-h200"}
    assert [t["nodeid"] for t in groups["gpu-h200"]["tests"]] == ["tests/test_fi_act.py::test_gpu"]
    assert groups["gpu-h200"]["tests"][0]["source"] == "marker:test_gpu"
    assert groups["gpu-h200"]["tests"][0]["stage"] == "fi-gpu"

    for name, runners in (("test_fi_act.py::test_gpu", {"gpu-h200"}), ("test_fi_act.py::test_cpu", {"cpu"}),
                          ("test_gpu_only.py", {"gpu-h200"})):
        p = _run(RERUN, repo, "--format", "json", name)
        assert {g["runner"] for g in json.loads(p.stdout)["groups"]} == runners, name

    names = ("test_fi_act.py", "test_nested.py")
    p = _run(RERUN, repo, "--exec", *names, runner="cpu")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _ran(repo) == sorted(CPU_TESTS)
    smi(["0, NVIDIA H200, 9.0, 143771, GPU-1234"])
    p = _run(RERUN, repo, "--exec", *names, runner="gpu-h200")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _ran(repo) == sorted(t for t in GPU_TESTS if not t.startswith("gpu_only"))
    # Asked by node id: only that test, on its runner.
    p = _run(RERUN, repo, "--exec", "test_nested.py::TestMixed::test_back_on_cpu", runner="cpu")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _ran(repo) == ["nested::TestMixed::test_back_on_cpu"]


def test_placed_scopes_are_nodes_not_string_prefixes_and_bad_use_is_a_usage_error(repo):
    """The plugin side alone: the longest --kc-placed scope holding a test decides."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", "-p", "no:randomly", "-v",
                        "--kc-runner=cpu", "--kc-placed=tests/test_nested.py::test_gpu=gpu-h200",
                        "--kc-placed=tests/test_nested.py::TestMixed=gpu-h200",
                        "--kc-placed=tests/test_nested.py::TestMixed::test_back_on_cpu=cpu",
                        "tests/test_nested.py"], capture_output=True, text=True, timeout=300, cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 3 deselected" in r.stdout
    assert _ran(repo) == ["nested::TestMixed::test_back_on_cpu", "nested::test_gpu_extra"]
    for args, msg in ((["--kc-placed=tests/test_nested.py::test_gpu=gpu-h200"], "needs --kc-runner"),
                      (["--kc-runner=cpu", "--kc-placed=tests/test_nested.py::test_gpu"], "write SCOPE=LABEL")):
        r = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", *args, "tests/test_nested.py"],
                           capture_output=True, text=True, timeout=300, cwd=repo)
        assert r.returncode == 4 and msg in r.stderr, r.stderr
    assert _ran(repo) == []
