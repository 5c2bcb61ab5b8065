"""Issue 41: ``kernelcache build --out ROOT --sglang MODULE:FACTORY`` exports the modules an SGLang
kernel factory loads (through the route, a hit on the session's cache: nothing compiled) into a
prebuilt root labelled with SGLang's version, and a host with no compiler and an empty cache
loads the n-gram module from that root under ``SGLANG_CRASH_ON_JIT_COMPILE=1``."""
from __future__ import annotations

import json
from pathlib import Path

from tests.support import compilerless_path

from .conftest import MODULE, SgEnv

FACTORY = "sglang.kernels.ops.speculative.ngram_corpus:get_ngram_corpus_cls"


def test_build_sglang_exports_a_root_a_compilerless_host_loads(sg: SgEnv, tmp_path: Path) -> None:
    root = tmp_path / "root"
    before = sg.links()
    p = sg.cli("build", "--out", str(root), "--sglang", FACTORY)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert MODULE in p.stdout and sg.links() == before, p.stdout
    manifests = list((root / "v1" / "entries" / MODULE).glob("*/*/manifest.json"))
    assert len(manifests) == 1
    from importlib.metadata import version

    assert json.loads(manifests[0].read_text())["prebuilt"]["sglang_version"] == version("sglang")
    bad = sg.cli("build", "--out", str(tmp_path / "r2"), "--sglang", "sglang.kernels.ops.speculative.ngram_corpus:nope")
    assert bad.returncode == 1 and "failed" in bad.stdout, bad.stdout + bad.stderr[-2000:]
    host = tmp_path / "host"
    out = sg.probe(KERNELCACHE_DIR=str(host / "cache"), KERNELCACHE_PREBUILT=str(root), CXX=str(host / "no-cxx"),
                   PATH=compilerless_path(tmp_path / "bin"), SGLANG_CRASH_ON_JIT_COMPILE="1",
                   SGLANG_JIT_CACHE_DIR=str(host / "sglang-jit"))
    assert out["routed"] and out["so"].startswith(str(root)) and sg.links() == before, out
    assert out["BFS"] == sg.routed_answer["BFS"]  # type: ignore[attr-defined]
