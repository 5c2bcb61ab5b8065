"""The CLI's cache and tool commands (kernelcache/cli/cache.py, tools.py), run in-process through
``kernelcache.cli.main`` against real caches: the session's adder entry, the suite's cache of
shipped kernels (warmed by the plugin; built here if not), and throwaway ones for commands that
change things. Each test asserts what the command printed and what it did on disk.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kernelcache.base.layout import Layout

import kernelcache as kc
from kernelcache.cli import main
from tests.support import HANG_S, REPO, project_spec, replace_file

# The suite's own cache (where `-p kernelcache` warmed the shipped kernels), read before any
# test points KERNELCACHE_DIR elsewhere.
SUITE_CACHE = str(kc.Settings.from_env().cache_dir)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def adder_cache(built_adder, monkeypatch):
    """The CLI pointed at the session's adder cache (read-only commands only)."""
    for k in [k for k in os.environ if k.startswith("KERNELCACHE_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("KERNELCACHE_DIR", str(built_adder.settings.cache_dir))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(built_adder.settings.lock_dir))
    monkeypatch.setenv("KERNELCACHE_LOG", "0")
    return built_adder


@pytest.fixture
def suite_cache(monkeypatch):
    monkeypatch.setenv("KERNELCACHE_DIR", SUITE_CACHE)
    for k in ("KERNELCACHE_NO_BUILD", "KERNELCACHE_REBUILD", "KERNELCACHE_REMOTE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KERNELCACHE_LOG", "0")
    return Path(SUITE_CACHE)


# -- cache.py -------------------------------------------------------------------------------------
def test_ls_json_lists_the_entry_with_its_key_and_size(adder_cache, capsys):
    rc, out, _ = _run(capsys, "ls", "--json")
    items = [i for i in json.loads(out) if i["name"] == "adder"]
    assert rc == 0 and len(items) == 1
    item = items[0]
    assert Path(item["path"]) == adder_cache.entry_dir and item["source"] == "cache"
    assert item["size"] > 0 and adder_cache.entry_dir.parent.name == item["key"][:32]
    rc, out, _ = _run(capsys, "ls", "no_such_kernel")
    assert rc == 0 and "(empty)" in out


def test_stats_counts_entries_per_kernel(adder_cache, capsys):
    rc, out, _ = _run(capsys, "stats", "--json")
    rows = json.loads(out)
    assert rc == 0 and rows["adder"]["entries"] == 1 and rows["adder"]["fetched"] == 0
    assert rows["adder"]["size"] >= (adder_cache.entry_dir / "adder.so").stat().st_size
    rc, out, _ = _run(capsys, "stats")
    line = next(ln for ln in out.splitlines() if ln.startswith("adder"))
    assert line.split()[1:3] == ["1", "0"] and f"cache dir: {adder_cache.settings.cache_dir}" in out


def test_verify_reports_each_entry(adder_cache, capsys):
    rc, out, _ = _run(capsys, "verify", "adder")
    assert rc == 0 and out.splitlines()[-1] == "0 bad entries"
    lines = out.splitlines()  # a table: the cache, a header, the rule, one aligned row per entry
    assert lines[0] == f"cache dir: {adder_cache.settings.cache_dir}" and lines[1].split() == ["kernel", "entry", "from", "state"]
    assert lines[3].split() == ["adder", adder_cache.entry_dir.name[:12], "cache", "ok"]
    assert lines[3].index("cache") == lines[1].index("from")


def test_prune_needs_a_bound_and_evicts_by_size(kc_env, project, capsys):
    kc.load(project_spec(project))
    rc, _, err = _run(capsys, "prune")
    assert rc == 2 and "--max-size and/or --max-age" in err and len(kc_env.entries()) == 1
    rc, out, _ = _run(capsys, "prune", "--max-size", "0")
    assert rc == 0 and out.splitlines()[-1] == "1 entry evicted" and kc_env.entries() == []


def test_verify_fix_quarantines_and_clean_removes_everything(kc_env, project, capsys):
    kc.load(project_spec(project))
    so = kc_env.entries()[0] / "adder.so"
    replace_file(so, so.read_bytes()[:64])
    rc, out, _ = _run(capsys, "verify", "--fix")
    assert rc == 1 and "BAD" in out and out.splitlines()[-1] == "1 bad entry" and kc_env.entries() == []
    assert any(Layout(kc_env.cache).quarantine.iterdir())
    rc, out, _ = _run(capsys, "clean", "--yes")
    assert rc == 0 and out.strip() == f"removed {Layout(kc_env.cache).root}" and not (kc_env.cache / "v1").exists()


def test_warm_and_explain_a_shipped_kernel(suite_cache, capsys):
    rc, out, _ = _run(capsys, "warm", "--json", "ngram_corpus")
    (first,) = json.loads(out)
    assert rc == 0 and first["name"] == "ngram_corpus" and first["status"] in ("hit", "built")
    rc, out, _ = _run(capsys, "warm", "ngram_corpus")
    assert rc == 0 and "ngram_corpus" in out and "1 hit" in out and f"cache dir {suite_cache}" in out
    rc, out, _ = _run(capsys, "explain", "--json", "ngram_corpus")
    info = json.loads(out)
    assert rc == 0 and info["status"] == "hit" and info["name"] == "ngram_corpus"
    assert "ngram_corpus/trie.cc" in info["inputs"]["sources"]
    rc, out, _ = _run(capsys, "explain", "ngram_corpus")
    assert rc == 0 and out.startswith("kernel:  ngram_corpus\n") and f"key:     {info['key1']}" in out
    lines = out.splitlines()  # the text carries what the JSON does (issue 46)
    assert "kind:    tvm_ffi (tvm-ffi module)" in lines and f"root:    {info['root']}" in lines, out
    assert any(ln.startswith("entry:   ") and "dependencies recorded)" in ln for ln in lines), out
    assert any(ln.startswith("  cflags: ") for ln in lines), out


def test_unknown_kernel_is_exit_2_with_the_known_names(suite_cache, capsys):
    rc, _, err = _run(capsys, "explain", "no_such_kernel")
    assert rc == 2 and "no_such_kernel" in err and "ngram_corpus" in err


# -- tools.py -------------------------------------------------------------------------------------
def test_doctor_reports_each_tool(kc_env, capsys):
    rc, out, _ = _run(capsys, "doctor")
    labels = {ln.split("  ")[0].strip() for ln in out.splitlines()}
    assert {"python", "cache dir", "lock dir", "c++", "ninja", "apache-tvm-ffi", "prebuilt roots"} <= labels
    assert f"{kc_env.cache} (writable:" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("c++"))
    assert "MISSING" not in line and rc == 0  # every CPU-path tool is present on a test host


def test_build_and_pack_make_a_companion_wheel(suite_cache, tmp_path, capsys):
    root = tmp_path / "root"
    rc, out, _ = _run(capsys, "build", "ngram_corpus", "--out", str(root))
    assert rc == 0 and out.split()[0] == "ngram_corpus" and out.split()[1] in ("hit", "built")
    assert Layout(root).is_artifact_root() and list(Layout(root).kernel_dir("ngram_corpus").glob("*/*/manifest.json"))
    rc, out, _ = _run(capsys, "pack", str(root), "--tag", "testcli", "--out", str(tmp_path / "dist"))
    whl = Path(out.strip())
    assert rc == 0 and whl.is_file() and whl.name.startswith("kernelcache_prebuilt_testcli-0.1.0-py3-none-")
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        ep = z.read("kernelcache_prebuilt_testcli-0.1.0.dist-info/entry_points.txt").decode()
    assert "[kernelcache.prebuilt]\ntestcli = kernelcache_prebuilt_testcli:root" in ep
    assert any(n.endswith("/manifest.json") and "/root/v1/entries/ngram_corpus/" in n for n in names)
    rc, _, err = _run(capsys, "pack", str(tmp_path), "--tag", "testcli")
    assert rc == 1 and "not an artifact root" in err


def test_python_dash_m_entry_point(kc_env):
    p = subprocess.run([sys.executable, "-m", "kernelcache", "stats", "--json"], env=kc_env.env(), cwd=REPO,
                       capture_output=True, text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and json.loads(p.stdout) == {}, p.stderr
