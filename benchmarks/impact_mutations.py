"""Mutation study of test impact selection over this repository.

For each real edit (a line broken in native sources and headers of both kernels, in loader and
plugin modules, in test helpers, a conftest, docs only, renamed files ...) it runs the tests
``--kc-affected-since HEAD`` selects and the whole test universe, and checks that every test
whose outcome the edit changed (against an unedited baseline run) was selected: 0 missed. It
reports the tests and test seconds each selection saved.

The edits are made in a temporary clone of this checkout's HEAD (never in the working tree);
the clone shares the kernel cache, so unchanged kernels are cache hits. The universe is a
representative subset (the whole suite per edit is too slow on a 2-core machine): see
UNIVERSE and SKIP, or pass paths. Per edit: the selection in-process
(``kernelcache.impact.api.affected``, the code path of ``kernelcache affected``, of
``ci/affected-tests`` and of the plugin), and the full run unless everything was selected.
Edits of every kind: modify, rename, delete, add, and partial re-recording (a first edit
committed and the map re-recorded for one test file only, then the edit under study).

    python benchmarks/impact_mutations.py [--only NAME ...] [--keep] [-n 2] [PATHS ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Both kernels' test files but test_ngram_corpus.py (35 s per run here; test_ngram_random.py runs
# the same kernel against the reference), the layering checks (they parse every module), and the
# fast unit files: ~30 s of tests per run, 3 runs per edit, on a shared 2-core machine.
UNIVERSE = ["tests/kernels/test_ngram_random.py", "tests/kernels/test_tree_sampling.py",
            "tests/unit/test_layering.py", "tests/unit/test_gpu.py", "tests/unit/test_plan.py",
            "tests/unit/test_manifest.py"]
# --small (issue 22's rerun on a machine at load 10-15, where one run of UNIVERSE took 119 s of test
# time): the same files, the kernels' tests cut to 10 reference seeds, the eviction tests and the
# sampling kernel's CPU input checks
SMALL = ["tests/kernels/test_ngram_random.py::test_random_eviction_heavy",
         *[f"tests/kernels/test_ngram_random.py::test_random_against_reference[{i}]" for i in range(10)],
         "tests/kernels/test_tree_sampling.py::test_bad_inputs_cpu",
         "tests/unit/test_layering.py", "tests/unit/test_gpu.py", "tests/unit/test_plan.py",
         "tests/unit/test_manifest.py"]
# 34 s of torch.compile tracing per run on this machine; it is a CPU test of the sampling kernel's
# Python op and is selected by the same rules as its neighbours
SKIP = ["tests/kernels/test_tree_sampling.py::test_torch_compile_fullgraph_traces_custom_op_cpu"]
NG = "kernelcache/csrc/ngram_corpus/"
TS = "kernelcache/csrc/speculative_sampling/"


@dataclass
class Mutation:
    name: str
    path: str
    old: str = ""  # replaced (first occurrence) by new; "" with new: appended
    new: str = ""
    rename_to: str = ""
    also: tuple[str, str] = ("", "")  # a second file and text appended to it
    expect: str = ""  # "nothing" | "everything" | "not:<substring of node ids>" (checked, reported)
    delete: bool = False
    create: str | None = None  # a new file's text (path must not exist)
    # partial re-recording first: this edit is committed, the map re-recorded for `record` only
    # (the other records keep their older commit), then the mutation itself is applied
    before: "Mutation | None" = None
    record: str = ""


# a test module that reads a data file next to the n-gram kernel's sources when it is imported
GOLDEN_TEST = """

from pathlib import Path as _Path  # noqa: E402

_GOLDEN = (_Path(__file__).resolve().parents[2] / "kernelcache/csrc/ngram_corpus/golden.txt").read_text().split()


@pytest.mark.parametrize("value", _GOLDEN)
def test_golden_value(value):
    assert value == "3"
"""


MUTATIONS = [
    Mutation("ngram corpus.cc: validation bound", NG + "corpus.cc", "p.min_bfs_breadth <= 0", "p.min_bfs_breadth <= 1",
             expect="not:test_tree_sampling"),
    Mutation("ngram draft.cc: comparison", NG + "draft.cc", "if (v > current) return v;", "if (v >= current) return v;",
             expect="not:test_tree_sampling"),
    Mutation("ngram ngram_corpus_ffi.cc: syntax", NG + "ngram_corpus_ffi.cc",
             "return reinterpret_cast<const T*>", "return @ reinterpret_cast<const T*>", expect="not:test_tree_sampling"),
    Mutation("ngram sam.cc: empty-corpus check", NG + "sam.cc", "if (n <= 0) throw", "if (n <= 1) throw",
             expect="not:test_tree_sampling"),
    Mutation("ngram trie.cc: capacity check", NG + "trie.cc", "if (capacity < 2 ||", "if (capacity < 3 ||",
             expect="not:test_tree_sampling"),
    Mutation("ngram trie.h (header): syntax", NG + "trie.h", "if (s.child == 0) return 0;",
             "if (s.child == 0) return 0 @;", expect="not:test_tree_sampling"),
    Mutation("ngram common.h (header): syntax", NG + "common.h", "T& operator[](size_t i) { return p_[i]; }",
             "T& operator[](size_t i) { return p_[i] @; }", expect="not:test_tree_sampling"),
    # the sampling kernel is not built on a CPU runner, so no compiler read its files there; they lie
    # under the n-gram kernel's root too (both have root kernelcache/csrc), whose rule for a file
    # under its root that no compiler read selects the n-gram tests: safe, not precise
    Mutation("tree tree_sampling.cu: message", TS + "tree_sampling.cu", 'return s + (n == 1 ? ",)" : ")");',
             'return s + (n == 2 ? ",)" : ")");', expect=""),
    Mutation("tree tree_sampling.cuh (header): syntax", TS + "tree_sampling.cuh",
             "return (v >= 0 && v < n) ? static_cast<int32_t>(v) : -1;",
             "return (v >= 0 && v < n) ? static_cast<int32_t>(v) : -1 @;", expect=""),
    Mutation("ngram sam.h renamed (header)", NG + "sam.h", rename_to=NG + "sam_renamed.h",
             expect="not:test_tree_sampling"),
    Mutation("loader.py: type check message", "kernelcache/lookup/loader.py", "expects a KernelSpec, got",
             "expects a spec, got", expect="everything"),
    Mutation("key.py: dependency check", "kernelcache/key/deps.py", "cur == d[\"stat\"]", "cur != d[\"stat\"]",
             expect="everything"),
    Mutation("pytest plugin report.py: format", "kernelcache/pytest_plugin/report.py", "REPORT_FORMAT = 1",
             "REPORT_FORMAT = 2", expect="everything"),
    Mutation("pytest plugin kernels.py: skip reason", "kernelcache/pytest_plugin/kernels.py",
             'pytest.skip(f"kernel {name!r} {r[\'reason\']}")', 'pytest.skip(f"kernel {name!r}")',
             expect="everything"),
    Mutation("payload ngram_corpus/call.py: message", "kernelcache/kernels/ngram_corpus/call.py",
             "match_type must be 'BFS' or 'PROB', got", "match_type must be BFS or PROB, got"),
    Mutation("payload speculative_sampling/call.py: split rule", "kernelcache/kernels/speculative_sampling/call.py",
             "    if bs >= sms:\n        return 1", "    if bs > sms:\n        return 1"),
    Mutation("test helper ngram_reference.py", "tests/kernels/ngram_reference.py",
             "return self._hash(k) % self.bc", "return (self._hash(k) + 1) % self.bc",
             expect="not:test_tree_sampling"),
    Mutation("test helper tree_sampling_reference.py", "tests/kernels/tree_sampling_reference.py",
             "return int(v) if 0 <= v < n else -1", "return int(v) if 0 < v < n else -1", expect="not:test_ngram"),
    Mutation("test helper renamed (ngram_reference.py)", "tests/kernels/ngram_reference.py",
             rename_to="tests/kernels/ngram_ref.py", expect="not:test_tree_sampling"),
    Mutation("test file test_ngram_random.py: assertion", "tests/kernels/test_ngram_random.py",
             "assert ids.tolist() == rids_ref, ctx", "assert ids.tolist() != rids_ref, ctx",
             expect="not:test_tree_sampling"),
    Mutation("conftest.py", "tests/conftest.py", new="\n# impact mutation\n", expect="everything"),
    Mutation("docs only: README.md", "README.md", new="\nimpact mutation\n", expect="nothing"),
    Mutation("docs only: docs/ngram_corpus.md + benchmark script", "docs/ngram_corpus.md", new="\nimpact mutation\n",
             also=("benchmarks/bench_ngram.py", "\n# impact mutation\n"), expect="nothing"),
    Mutation("CI config ci/suites.toml", "ci/suites.toml", new="\n# impact mutation\n", expect="everything"),
    # issue 22: every kind (modify, rename, delete, add, partial re-recording). No expectation
    # where the safe rules select more than the edit's own kernel: both kernels share the root
    # kernelcache/csrc, so a header deleted or renamed there (a file list change) selects both;
    # a deleted test file or helper changes what tests that list tests/ read
    Mutation("ngram trie.h deleted (header)", NG + "trie.h", delete=True, expect="not:test_tree_sampling"),
    Mutation("tree tree_sampling.cuh deleted (header)", TS + "tree_sampling.cuh", delete=True, expect=""),
    Mutation("tree tree_sampling.cuh renamed (header)", TS + "tree_sampling.cuh", rename_to=TS + "ts_renamed.cuh",
             expect=""),
    Mutation("test helper deleted (tree_sampling_reference.py)", "tests/kernels/tree_sampling_reference.py", delete=True,
             expect=""),
    Mutation("test file deleted (test_plan.py)", "tests/unit/test_plan.py", delete=True, expect=""),
    Mutation("docs deleted (docs/ngram_corpus.md)", "docs/ngram_corpus.md", delete=True, expect="nothing"),
    Mutation("docs renamed (docs/test_impact.md)", "docs/test_impact.md", rename_to="docs/impact.md", expect="nothing"),
    Mutation("ngram: new file next to its sources", NG + "notes.txt", create="scratch\n",
             expect="not:test_tree_sampling"),
    Mutation("ngram: new header next to its sources", NG + "extra.h", create="#pragma once\n",
             expect="not:test_tree_sampling"),
    Mutation("new test file", "tests/unit/test_impact_new.py", create="def test_new():\n    assert True\n"),
    Mutation("new docs page", "docs/new_page.md", create="# New\n", expect="nothing"),
    # kernelcache/kernels/__init__.py names both kernel packages (import_module strings), so every
    # test importing kernelcache.kernels depends on both: a safe superset, no expectation
    Mutation("spec module ngram_corpus/spec.py", "kernelcache/kernels/ngram_corpus/spec.py", new="\n# impact mutation\n"),
    Mutation("checks module ngram_corpus/checks.py", "kernelcache/kernels/ngram_corpus/checks.py",
             new="\n# impact mutation\n"),
    Mutation("test file test_tree_sampling.py: comment", "tests/kernels/test_tree_sampling.py", new="\n# impact mutation\n",
             expect="not:test_ngram"),
    Mutation("plan.py (plugin closure)", "kernelcache/key/plan.py", new="\n# impact mutation\n", expect="everything"),
    Mutation("README.md (no doc test in the universe)", "README.md", "kernelcache", "kernel-cache", expect="nothing"),
    Mutation("partial re-record, then ngram's new header edited", NG + "added.h", "ADDED_VALUE 0", "ADDED_VALUE 1",
             before=Mutation("ngram common.h gains a header", NG + "common.h", "#include <new>\n",
                             "#include <new>\n#include \"added.h\"\n",
                             also=(NG + "added.h", "#pragma once\n#define ADDED_VALUE 0\n")),
             record="tests/unit/test_plan.py", expect="not:test_tree_sampling"),
    Mutation("partial re-record, then tree header broken", TS + "tree_sampling.cuh", "// Tree speculative",
             "@@ Tree speculative",
             before=Mutation("docs edit committed", "docs/layout.md", new="\nimpact mutation\n"),
             record="tests/kernels/test_tree_sampling.py", expect="not:test_ngram"),
    # issue 22 (rerun): a header outside the kernel's root (reached by a relative include), and a
    # data file next to a kernel's sources read when a test module is imported
    Mutation("header outside the root (kernelcache/extra/x.h) broken", "kernelcache/extra/x.h",
             "#define EXTRA_VALUE 0", "#error a broken header outside the kernel's root",
             before=Mutation("ngram common.h includes ../../extra/x.h", NG + "common.h", "#include <new>\n",
                             "#include <new>\n#include \"../../extra/x.h\"\n",
                             also=("kernelcache/extra/x.h", "#pragma once\n#define EXTRA_VALUE 0\n")),
             record="tests/kernels/test_ngram_random.py::test_random_eviction_heavy", expect="not:test_tree_sampling"),
    Mutation("data file read at import (ngram_corpus/golden.txt) edited", NG + "golden.txt", "3", "4",
             before=Mutation("test_plan.py reads ngram_corpus/golden.txt at import", "tests/unit/test_plan.py",
                             new=GOLDEN_TEST, also=(NG + "golden.txt", "3\n")),
             record="tests/unit/test_plan.py", expect="not:test_tree_sampling"),
]


def sh(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def pytest_run(clone: Path, env: dict, paths: list[str], report: Path, workers: int, *extra: str) -> dict:
    """Run pytest; {nodeid: (outcome, duration)} and the report's impact section."""
    report.unlink(missing_ok=True)
    xd = ["-p", "xdist", "-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    proc = sh([sys.executable, "-m", "pytest", "-p", "kernelcache", "-q", "-o", "addopts=", "-rE",
               "--continue-on-collection-errors", *xd, *paths, f"--kc-report-json={report}", *extra], clone, env)
    if not report.exists():
        raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    data = json.loads(report.read_text())
    tests = {t["nodeid"]: (t["outcome"], float(t["duration"])) for t in data["tests"]}
    # a test file that no longer imports: its tests vanish, the run reports "ERROR <file>"
    broken = {line.split()[1].split("::")[0] for line in proc.stdout.splitlines() if line.startswith("ERROR ")}
    return {"tests": tests, "impact": data.get("impact"), "exit": proc.returncode, "broken": broken}


def apply(clone: Path, m: Mutation) -> None:
    p = clone / m.path
    if m.delete:
        p.unlink()
        return
    if m.create is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(m.create)
        return
    if m.rename_to:
        sh(["git", "mv", m.path, m.rename_to], clone).check_returncode()
        return
    text = p.read_text()
    if m.old:
        if m.old not in text:
            raise RuntimeError(f"{m.name}: {m.old!r} not found in {m.path}")
        text = text.replace(m.old, m.new, 1)
    else:
        text += m.new
    p.write_text(text)
    if m.also[0]:
        q = clone / m.also[0]
        q.parent.mkdir(parents=True, exist_ok=True)
        q.write_text((q.read_text() if q.exists() else "") + m.also[1])


def revert(clone: Path) -> None:
    sh(["git", "reset", "-q", "--hard"], clone).check_returncode()
    sh(["git", "clean", "-fdq"], clone).check_returncode()


def check_expect(m: Mutation, selected: dict, everything: str | None) -> str:
    if m.expect == "nothing":
        return "ok" if not selected and not everything else "UNEXPECTED: something selected"
    if m.expect == "everything":
        return "ok" if everything else "UNEXPECTED: not everything"
    if m.expect.startswith("not:"):
        bad = [n for n in selected if m.expect[4:] in n]
        return "ok" if not bad and not everything else f"UNEXPECTED: {len(bad)} {m.expect[4:]} test(s) selected"
    return "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=UNIVERSE)
    ap.add_argument("--only", action="append", default=[], help="run the mutations whose name contains this")
    ap.add_argument("-n", "--workers", type=int, default=0, help="xdist workers per run (default: none)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone")
    ap.add_argument("--small", action="store_true", help="the SMALL universe (a loaded machine)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / ".out" / "impact_mutations.json"))
    args = ap.parse_args()
    if args.small:
        args.paths = SMALL
    muts = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    tmp = Path(tempfile.mkdtemp(prefix="kc-impact-study-"))
    clone = tmp / "repo"
    sh(["git", "clone", "-q", str(REPO), str(clone)], tmp).check_returncode()
    env = {**os.environ, "PYTHONPATH": str(clone), "KERNELCACHE_LOG": "0"}
    env.pop("PYTEST_ADDOPTS", None)
    head = sh(["git", "rev-parse", "--short", "HEAD"], clone).stdout.strip()
    imap = tmp / "impact-map.json"
    deselect = [f"--deselect={n}" for n in SKIP]
    print(f"clone of {REPO} at {head} in {clone}; universe: {' '.join(args.paths)}; -n {args.workers}")
    t0 = time.monotonic()
    base = pytest_run(clone, env, args.paths, tmp / "base.json", args.workers, f"--kc-impact-map={imap}", *deselect)
    n_all = len(base["tests"])
    t_all = sum(d for _, d in base["tests"].values())
    print(f"baseline: {n_all} tests, {t_all:.1f}s of test time, recorded {imap.name} "
          f"({time.monotonic() - t0:.0f}s wall)")
    rows = []
    sys.path.insert(0, str(REPO))
    from kernelcache.impact.api import affected  # the path `kernelcache affected` and ci/affected-tests take

    pristine = sh(["git", "rev-parse", "HEAD"], clone).stdout.strip()
    try:
        for m in muts:
            t1 = time.monotonic()
            mcopy = tmp / "map-copy.json"
            shutil.copy(imap, mcopy)
            if m.before is not None:  # commit a first edit, re-record part of the map there
                apply(clone, m.before)
                sh(["git", "add", "-A"], clone).check_returncode()
                sh(["git", "-c", "user.email=s@example.invalid", "-c", "user.name=study", "commit", "-qm",
                    m.before.name], clone).check_returncode()
                pytest_run(clone, env, [m.record], tmp / "partial.json", 0, f"--kc-impact-map={mcopy}", *deselect)
            apply(clone, m)
            # the selection in-process (what the CLI and ci/affected-tests compute), then the full run
            ts = time.perf_counter()
            res = affected(clone, "HEAD", mcopy, graph_cache=tmp / "import-facts.json")
            sel_s = time.perf_counter() - ts
            everything = res["everything"]
            selected = res["selected"]
            full = base if everything else pytest_run(clone, env, args.paths, tmp / "full.json", args.workers,
                                                      *deselect)
            sh(["git", "reset", "-q", "--hard", pristine], clone).check_returncode()
            revert(clone)
            # the session itself aborted (a node id of --small whose file no longer imports is
            # "not found": a usage error): every run fails loudly, the selected one too
            aborted = not full["tests"] and full["exit"] in (3, 4)
            changed = {n for n, (o, _) in full["tests"].items() if base["tests"].get(n, (None,))[0] != o}
            vanished = {n for n in base["tests"] if n not in full["tests"]}  # their file broke at collection
            changed |= vanished
            # a collection error is never deselected: the selected run reports it too
            caught = changed if aborted else {n for n in vanished if n.split("::")[0] in full["broken"]}
            new = {n for n in full["tests"] if n not in base["tests"]}
            missed = sorted(n for n in changed - caught if not everything and n not in selected
                            and n.split("::")[0] not in res["new_files"] and n not in new)
            missed += sorted(n for n in new if not everything and n.split("::")[0] not in res["files"])
            desel = [n for n in full["tests"] if n not in selected and n.split("::")[0] not in res["new_files"]] \
                if not everything else []
            saved_t = sum(base["tests"].get(n, (None, 0.0))[1] for n in desel)
            row = {"mutation": m.name, "path": m.path, "selected": n_all if everything else len(selected),
                   "deselected": len(desel), "outcome_changed": len(changed), "missed": missed,
                   "saved_test_s": round(saved_t, 2), "everything": everything, "aborted": aborted,
                   "expect": check_expect(m, selected, everything), "reasons": sorted(set(selected.values()))[:5],
                   "wall_s": round(time.monotonic() - t1, 1), "selection_s": round(sel_s, 3)}
            rows.append(row)
            print(f"{m.name:48s} selected {row['selected']:4d}  deselected {row['deselected']:4d}  "
                  f"changed {len(changed):3d}  missed {len(missed)}  saved {saved_t:6.1f}s  sel {sel_s:.2f}s "
                  f"{'ALL' if everything else ''} {row['expect']}", flush=True)
    finally:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        if imap.exists():  # a real map for benchmarks/impact_selection.py
            shutil.copy(imap, Path(args.out).parent / "impact-map.json")
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    missed_total = sum(len(r["missed"]) for r in rows)
    saved = sum(r["saved_test_s"] for r in rows)
    print(f"\n{len(rows)} mutations; missed {missed_total}; tests deselected {sum(r['deselected'] for r in rows)} of "
          f"{n_all * len(rows)}; test time saved {saved:.1f}s of {t_all * len(rows):.1f}s "
          f"({100 * saved / max(t_all * len(rows), 1e-9):.0f}%)")
    out = Path(args.out)
    out.write_text(json.dumps({"head": head, "universe": args.paths, "tests": n_all, "test_s": round(t_all, 2),
                               "mutations": rows}, indent=1))
    print(f"written {out}")
    return 1 if missed_total or any(r["expect"].startswith("UNEXPECTED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
