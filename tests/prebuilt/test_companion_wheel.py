"""Issue 6, acceptance 1: a serving host with no compiler runs the n-gram kernel from a wheel.

Builds a relocatable artifact root with `kernelcache build`, packs it into a companion wheel,
installs kernelcache (non-editable) and the wheel into a fresh venv, hides every compiler
(CXX=/bin/false, PATH without c++/nvcc) and runs the n-gram tests there with
KERNELCACHE_NO_BUILD=1. Needs PyPI for the fresh venv's dependencies.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import build_tree_copy

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def _run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    assert p.returncode == 0, f"{argv}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p


def test_fresh_venv_without_compiler_uses_companion_wheel(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
    env["KERNELCACHE_LOG"] = "0"
    root = tmp_path / "artifacts"
    # 1. artifact root + companion wheel, made with this (compiler-equipped) installation
    _run([sys.executable, "-m", "kernelcache", "build", "ngram_corpus", "--out", str(root)],
         env={**env, "KERNELCACHE_DIR": os.environ.get("KERNELCACHE_DIR", str(tmp_path / "cache"))})
    whl = _run([sys.executable, "-m", "kernelcache", "pack", str(root), "--tag", "testcpu",
                "--out", str(tmp_path / "dist")], env=env).stdout.strip().splitlines()[-1]
    # 2. a fresh venv: kernelcache (built from this checkout, not editable) + the wheel
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(REPO / "ci" / "constraints.txt")]
    _run([*pip, str(build_tree_copy(tmp_path / "kernelcache-src")), whl, "pytest"], env=env, timeout=900)
    # 3. no compiler anywhere: PATH holds only the venv's bin
    tests = tmp_path / "tests"  # the same package layout: conftest, support, kernels/
    for name in ("__init__.py", "conftest.py", "support.py", "kernels/__init__.py", "kernels/ngram_reference.py",
                 "kernels/test_ngram_corpus.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(TESTS / name, tests / name)
    cache = tmp_path / "serving-cache"
    serving_env = {
        "PATH": str(venv / "bin"), "HOME": str(tmp_path), "CXX": "/bin/false", "CC": "/bin/false",
        "KERNELCACHE_NO_BUILD": "1", "KERNELCACHE_DIR": str(cache), "KERNELCACHE_LOG": "stderr",
    }
    probe = _run([py, "-c", "import shutil, kernelcache.lookup.loader as L\n"
                  "from kernelcache.kernels import NgramCorpus, shipped_specs\n"
                  "assert shutil.which('c++') is None and shutil.which('nvcc') is None\n"
                  "m, r = L.load_with_result(shipped_specs(['ngram_corpus'])['ngram_corpus'])\n"
                  "import kernelcache; print(r.status, kernelcache.__file__)\n"
                  "c = NgramCorpus(max_trie_depth=4, draft_token_num=3, capacity=100)\n"
                  "c.batch_put([[1, 2, 3]]); c.synchronize()\n"
                  "print(c.batch_get(['r'], [[1]], [1])[0].tolist())"],
                 env=serving_env, cwd=str(tmp_path))
    status, location = probe.stdout.split("\n")[0].split()
    assert status == "prebuilt" and str(venv) in location
    assert probe.stdout.split("\n")[1] == "[1, 2, 3]"
    result = _run([py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(tests)],
                  env=serving_env, cwd=str(tmp_path), timeout=900)
    assert " passed" in result.stdout and "failed" not in result.stdout
    assert not (cache / "v1" / "entries").exists()  # nothing was built on the serving host
