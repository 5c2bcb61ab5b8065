"""Run SGLang's own JIT-kernel tests plain and through the route, and compare their outcomes.

They are never copied into this repository: fetch SGLang test files (e.g.
``test/registered/spec/utils/test_ngram_corpus.py``, or on a GPU machine the JIT-kernel tests of a
set of modules) from sgl-project/sglang into a directory outside it and point this script at it::

    python tests/sglang/upstream_suite.py /tmp/sglang-tests [--warm] [--json OUT]

Each run gets fresh caches and a fresh copy of the directory: ``plain`` runs SGLang's own JIT
(``SGLANG_JIT_CACHE_DIR``), ``routed`` the same tests under ``python -m kernelcache.sglang -m
pytest`` (``load_jit`` through kernelcache). The suite passes when every test has the same
outcome in both runs, the routed run built through kernelcache (an entry in its cache) and left
SGLang's cache directory uncreated, and the plain run wrote no kernelcache entry. ``--warm``
adds a third run: routed again on the routed run's kernelcache cache with a fresh
``SGLANG_JIT_CACHE_DIR``; it must give the same outcomes with 0 builds (``build_done`` events in
its ``KERNELCACHE_LOG`` file).

``sglang.test.test_utils`` (the tests' ``CustomTestCase``) imports SGLang's serving stack down to
torchvision; where that import fails (a CPU-only torch without a matching torchvision), a
``conftest.py`` written into the copy stands in ``unittest.TestCase`` for it, says so, and leaves
every n-gram code path SGLang's own. Exit status: 0 when the outcomes match.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAND_IN = '''"""Written by kernelcache's tests/sglang/upstream_suite.py, outside SGLang's tree."""
import sys
import types
import unittest

try:
    import sglang.test.test_utils  # noqa: F401
except Exception as e:  # torchvision & co: not what these tests exercise
    mod = types.ModuleType("sglang.test.test_utils")
    mod.CustomTestCase = unittest.TestCase
    sys.modules["sglang.test.test_utils"] = mod
    print(f"upstream_suite: sglang.test.test_utils not importable ({type(e).__name__}: {e}); "
          "CustomTestCase = unittest.TestCase", file=sys.stderr)
'''


def _outcomes(junit: Path, copy: str) -> dict[str, str]:
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                state = child.tag
        classname = case.get("classname") or ""  # module[.Class], after the copy's directory
        out[f"{classname.removeprefix(copy + '.')}::{case.get('name')}"] = state
    return out


def run(tests: Path, mode: str, work: Path, kc: Path | None = None) -> tuple[dict[str, str], Path, Path, str]:
    copy = work / f"{mode}-tests"
    shutil.copytree(tests, copy)
    (copy / "conftest.py").write_text(STAND_IN)
    kc, sg = kc or work / f"{mode}-kernelcache", work / f"{mode}-sglang-jit"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "SGLANG_"))}
    env.update({"KERNELCACHE_DIR": str(kc), "SGLANG_JIT_CACHE_DIR": str(sg), "KERNELCACHE_LOG": str(work / f"{mode}.log"),
                "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")})
    junit = work / f"{mode}.xml"
    pytest = ["-m", "pytest", str(copy), "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={junit}"]
    argv = [sys.executable, *(["-m", "kernelcache.sglang"] if mode != "plain" else []), *pytest]
    p = subprocess.run(argv, env=env, cwd=str(work), capture_output=True, text=True, timeout=3600)
    tail = (p.stdout + p.stderr)[-3000:]
    if not junit.exists():
        raise SystemExit(f"{mode}: pytest wrote no report (exit {p.returncode}):\n{tail}")
    return _outcomes(junit, copy.name), kc, sg, tail


def _builds(log: Path) -> int:
    """``build_done`` events a run's KERNELCACHE_LOG file holds (0 when it wrote none)."""
    if not log.exists():
        return 0
    return sum(json.loads(line).get("event") == "build_done" for line in log.read_text().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", type=Path, help="a directory holding SGLang test files (test_*.py)")
    ap.add_argument("--warm", action="store_true", help="a third, routed run on the routed cache: 0 builds")
    ap.add_argument("--json", type=Path, default=None, help="write per-test outcomes and counts here")
    ns = ap.parse_args(argv)
    if not list(ns.tests.glob("test_*.py")):
        print(f"{ns.tests}: no test_*.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kc-sglang-upstream-") as tmp:
        work = Path(tmp)
        plain, plain_kc, _, plain_tail = run(ns.tests, "plain", work)
        routed, routed_kc, routed_sg, routed_tail = run(ns.tests, "routed", work)
        entries = sorted(p.name for p in (routed_kc / "v1" / "entries").glob("*")) if routed_kc.exists() else []
        plain_entries = list((plain_kc / "v1" / "entries").glob("*")) if plain_kc.exists() else []
        runs = {"plain": plain, "routed": routed}
        builds = {"routed": _builds(work / "routed.log")}
        if ns.warm:
            warm, _, warm_sg, warm_tail = run(ns.tests, "warm", work, kc=routed_kc)
            runs["warm"] = warm
            builds["warm"] = _builds(work / "warm.log")
            routed_tail += f"\n--- warm ---\n{warm_tail}"
        differ = sorted(k for k in set().union(*runs.values()) if len({o.get(k) for o in runs.values()}) > 1)
        counts = {m: {s: list(o.values()).count(s) for s in sorted(set(o.values()))} for m, o in runs.items()}
        for m in runs:
            print(f"{m + ':':8}{counts[m]}" + (f"  builds: {builds[m]}" if m in builds else ""))
        print(f"kernelcache entries (routed): {entries}")
        ok = not differ and bool(entries) and not routed_sg.exists() and not plain_entries and bool(plain)
        if ns.warm:
            ok = ok and builds["warm"] == 0 and not warm_sg.exists()
        if ns.json:
            ns.json.write_text(json.dumps({"outcomes": runs, "counts": counts, "builds": builds,
                                           "entries": entries, "differ": differ, "ok": ok}, indent=1, sort_keys=True))
        for k in differ:
            print(f"  differs: {k}: " + ", ".join(f"{m} {o.get(k)}" for m, o in runs.items()))
        if routed_sg.exists():
            print("  the routed run created SGLANG_JIT_CACHE_DIR")
        if not ok:
            print(f"--- plain ---\n{plain_tail}\n--- routed ---\n{routed_tail}")
        print("same outcomes" if ok else "FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
