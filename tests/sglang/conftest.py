"""SGLang's own JIT (``load_jit``) through the route, on this CPU box: its n-gram corpus.

The module is the one this project was founded on: SGLang's ``NgramCorpus``, built by
``sglang.kernels.ops.speculative.ngram_corpus.get_ngram_corpus_cls`` (``load_jit("ngram_corpus",
cpp_files=[...], header_only=False)``, C++ only). It is built once per session through the route
(``sg``) and, where a test needs it, once by SGLang's own JIT (``plain``); every test then runs
real subprocesses against that state. Compiles are counted by the link steps of a counting
``CXX`` wrapper (SGLang's ninja file and kernelcache both compile and link through ``$CXX``).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO, WRAPPER

HANG_S = 1800
MODULE = "sgl_kernel_jit_ngram_corpus"
PROBE = """
import json, sys
from sglang.kernels.ops.speculative import ngram_corpus as ops
ops.get_ngram_corpus_cls()
from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus
import kernelcache.sglang as route
out = {"routed": bool(getattr(ops.load_jit, "__kernelcache_dropin__", False)),
       "so": str(route.loaded_path("sgl_kernel_jit_ngram_corpus") or "")}
for mode in ("BFS", "PROB"):
    c = NgramCorpus(max_trie_depth=8, min_bfs_breadth=1, max_bfs_breadth=4, draft_token_num=6, match_type=mode,
                    capacity=5000)
    c.batch_put([[5, 6, 7, 8, 9, 10], [5, 6, 7, 80, 90], [1, 5, 6, 7, 8]]); c.synchronize()
    ids, mask = c.batch_get(["a", "b"], [[5, 6, 7], [6, 7, 80]], [3, 3])
    out[mode] = [ids.tolist(), mask.tolist()]
print(json.dumps(out))
"""


@dataclass
class SgEnv:
    tmp: Path
    cache: Path
    locks: Path
    count_log: Path
    cxx: Path

    def env(self, route: bool = True, **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "SGLANG_", "KC_"))}
        e.update({
            "KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.locks),
            "KERNELCACHE_LOG": "0", "KC_COUNT_LOG": str(self.count_log), "CXX": str(self.cxx),
            "SGLANG_JIT_CACHE_DIR": str(self.tmp / "sglang-jit-unused"),
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        })
        if route:
            e["KERNELCACHE_PATCH"] = "sglang"
        e.update(extra)
        return e

    def run(self, route: bool = True, code: str = PROBE, check: bool = True, args: tuple[str, ...] = (),
            **kw: str) -> subprocess.CompletedProcess:
        p = subprocess.run([sys.executable, "-c", code, *args], env=self.env(route, **kw), capture_output=True,
                           text=True, timeout=HANG_S, cwd=self.tmp)
        if check and p.returncode != 0:
            raise AssertionError(f"probe failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
        return p

    def probe(self, route: bool = True, **kw: str) -> dict:
        return json.loads(self.run(route, **kw).stdout.splitlines()[-1])

    def links(self) -> int:
        try:
            return sum(1 for line in self.count_log.read_text().splitlines() if line.startswith("link "))
        except FileNotFoundError:
            return 0

    def cli(self, *args: str, **kw: str) -> subprocess.CompletedProcess:
        code = "import sys; from kernelcache.cli import main; raise SystemExit(main(sys.argv[1:]))"
        return subprocess.run([sys.executable, "-c", code, *args], env=self.env(**kw), capture_output=True,
                              text=True, timeout=600, cwd=self.tmp)


def _sglang_usable() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    from kernelcache.sglang import TESTED_VERSIONS

    try:
        found = version("sglang")
    except PackageNotFoundError:
        return "sglang is not installed (the [sglang] extra and `pip install --no-deps sglang`)"
    if found not in TESTED_VERSIONS:
        return f"sglang {found} is not a version the route is tested with"
    if not shutil.which("ninja") or not shutil.which("g++"):
        return "ninja or g++ not found"
    p = subprocess.run([sys.executable, "-c", "import sglang.kernels.ops.speculative.ngram_corpus"],
                       capture_output=True, text=True, timeout=600)
    return None if p.returncode == 0 else "sglang not importable: " + p.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sg(tmp_path_factory: pytest.TempPathFactory) -> SgEnv:
    """The session's state: the n-gram module built once through the route."""
    why = _sglang_usable()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("sg")
    cxx = tmp / "bin" / "cxx-wrapper"
    cxx.parent.mkdir()
    cxx.write_text(WRAPPER)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    env = SgEnv(tmp=tmp, cache=tmp / "cache", locks=tmp / "locks", count_log=tmp / "compiles.log", cxx=cxx)
    routed = env.probe()
    assert env.links() == 1 and routed["routed"] and routed["so"].startswith(str(env.cache)), routed
    env.routed_answer = routed  # type: ignore[attr-defined]
    return env


@dataclass
class Plain:
    answer: dict
    jit_dir: Path  # SGLang's own cache, warm with the module


@pytest.fixture(scope="session")
def plain(sg: SgEnv) -> Plain:
    """The same module built by SGLang's own JIT (no route), into its own cache."""
    jit_dir = sg.tmp / "sglang-own"
    before = sg.links()
    answer = sg.probe(route=False, SGLANG_JIT_CACHE_DIR=str(jit_dir))
    assert sg.links() == before + 1 and not answer["routed"] and answer["so"] == "", answer
    return Plain(answer=answer, jit_dir=jit_dir)
