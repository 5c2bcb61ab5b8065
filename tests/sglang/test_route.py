"""Issue 41: SGLang's ``load_jit`` through the route (``KERNELCACHE_PATCH=sglang``), acceptance on
the CPU: SGLang's n-gram corpus built once, found again by a fresh process with a fresh, empty
``SGLANG_JIT_CACHE_DIR`` without compiling, rebuilt once after a header edit that restored the
mtime, known to ``kernelcache ls`` / ``explain``, SGLang's knobs kept, other versions left to
SGLang. Every test fails before the route existed (``sglang`` was not a drop-in name)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import MODULE, PROBE, Plain, SgEnv

COPY_PROBE = """
import glob, json, sys
from sglang.kernels.jit.utils import load_jit
import kernelcache.sglang as route
mod = load_jit("kc_ngram_copy", cpp_files=sorted(glob.glob(sys.argv[1] + "/*.cpp")), header_only=False)
print(json.dumps({"so": str(route.loaded_path("sgl_kernel_jit_kc_ngram_copy") or "")}))
"""


def test_the_routed_module_answers_as_sglangs_own(sg: SgEnv, plain: Plain) -> None:
    routed = sg.routed_answer  # type: ignore[attr-defined]
    assert routed["BFS"] == plain.answer["BFS"] and routed["PROB"] == plain.answer["PROB"]
    assert list((sg.cache / "v1" / "entries").glob(MODULE)), "the routed build is a kernelcache entry"


def test_a_fresh_process_with_a_fresh_sglang_cache_compiles_nothing(sg: SgEnv, tmp_path: Path) -> None:
    before = sg.links()
    fresh = tmp_path / "sglang-jit"
    out = sg.probe(SGLANG_JIT_CACHE_DIR=str(fresh))
    assert sg.links() == before, "a warm kernelcache entry must not be compiled again"
    assert out["routed"] and out["so"] == sg.routed_answer["so"], out  # type: ignore[attr-defined]
    assert out["BFS"] == sg.routed_answer["BFS"]  # type: ignore[attr-defined]
    assert not fresh.exists(), "a routed load neither reads nor writes SGLANG_JIT_CACHE_DIR"
    # the same through the runner (python -m kernelcache.sglang), with no KERNELCACHE_PATCH
    script = tmp_path / "app.py"
    script.write_text(PROBE)
    p = subprocess.run([sys.executable, "-m", "kernelcache.sglang", str(script)], capture_output=True, text=True,
                       env=sg.env(route=False, SGLANG_JIT_CACHE_DIR=str(fresh)), timeout=1800, cwd=sg.tmp)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1])["so"] == out["so"] and sg.links() == before


def test_a_header_edit_with_its_mtime_restored_rebuilds_once(sg: SgEnv, tmp_path: Path) -> None:
    import sglang.kernels.jit as jit_pkg  # the installed tree: read only, its sources copied

    src = tmp_path / "ngram_corpus"
    shutil.copytree(Path(jit_pkg.__file__).parent / "csrc" / "ngram_corpus", src)
    before = sg.links()

    def run() -> dict:
        return json.loads(sg.run(code=COPY_PROBE, args=(str(src),)).stdout.splitlines()[-1])

    a = run()
    assert sg.links() == before + 1 and a["so"].startswith(str(sg.cache)), a
    header = src / "trie.h"
    st = header.stat()
    data = header.read_bytes()
    header.write_bytes(data.replace(b"#pragma once", b"#pragma  once", 1) if b"#pragma once" in data
                       else data + b" ")
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert header.stat().st_mtime_ns == st.st_mtime_ns
    b = run()
    assert sg.links() == before + 2 and b["so"] != a["so"], (a, b)
    c = run()
    assert sg.links() == before + 2 and c["so"] == b["so"], "rebuilt once, then a hit"


def test_kernelcache_ls_and_explain_know_the_module(sg: SgEnv) -> None:
    ls = sg.cli("ls", "--json")
    assert ls.returncode == 0, ls.stderr[-2000:]
    mine = [r for r in json.loads(ls.stdout) if r["name"] == MODULE]
    assert [r["path"] for r in mine] == [str(Path(sg.routed_answer["so"]).parent)], ls.stdout  # type: ignore[attr-defined]
    ex = sg.cli("explain", MODULE, "--json")
    assert ex.returncode == 0, ex.stdout + ex.stderr[-2000:]
    info = json.loads(ex.stdout)
    assert info["status"] == "hit" and info["entry"] == mine[0]["path"], info
    assert "\"sglang\"" in json.dumps(info["inputs"]), info  # the kind is keyed


def test_crash_on_jit_compile_means_no_build(sg: SgEnv, tmp_path: Path) -> None:
    before = sg.links()
    code = ("import json\nfrom sglang.kernels.ops.speculative import ngram_corpus as ops\ntry:\n"
            "    ops.get_ngram_corpus_cls()\nexcept RuntimeError as e:\n    print(json.dumps(str(e)))\n")
    p = sg.run(code=code, KERNELCACHE_DIR=str(tmp_path / "empty"), SGLANG_CRASH_ON_JIT_COMPILE="1")
    assert sg.links() == before and "SGLANG_CRASH_ON_JIT_COMPILE" in json.loads(p.stdout.splitlines()[-1])
    warm = sg.probe(SGLANG_CRASH_ON_JIT_COMPILE="1")  # a cached entry still loads
    assert warm["so"] == sg.routed_answer["so"] and sg.links() == before  # type: ignore[attr-defined]


def test_force_recompile_rebuilds(sg: SgEnv, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(sg.cache, cache, symlinks=True)
    before = sg.links()
    out = sg.probe(KERNELCACHE_DIR=str(cache), SGLANG_JIT_FORCE_RECOMPILE="1")
    assert sg.links() == before + 1 and out["so"].startswith(str(cache)), out


def test_an_untested_sglang_version_runs_sglangs_own_jit_with_one_line(sg: SgEnv, plain: Plain,
                                                                       tmp_path: Path) -> None:
    meta = tmp_path / "meta" / "sglang-0.5.22.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.22\n")
    before = sg.links()
    pythonpath = str(tmp_path / "meta") + os.pathsep + sg.env()["PYTHONPATH"]
    p = sg.run(PYTHONPATH=pythonpath, SGLANG_JIT_CACHE_DIR=str(plain.jit_dir))
    out = json.loads(p.stdout.splitlines()[-1])
    assert not out["routed"] and out["so"] == "" and sg.links() == before, out  # SGLang's own, warm
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("kernelcache.sglang:")]
    assert len(lines) == 1 and "SGLang 0.5.22 is not a version the route was tested with" in lines[0], p.stderr
    assert out["BFS"] == plain.answer["BFS"]
