"""Selection cost of test impact on this repository (goal: <= 1 s), against the costs around it.

A pull request that edits one kernel header: a temporary clone of this repository's HEAD, with
one line added to ``tree_sampling.cuh`` (uncommitted), and the map's records stamped with that
HEAD (the cost does not depend on how old the records are; their commit decides only staleness). Measures
``kernelcache.impact.api.affected`` in-process (git diff + map load + import graph of every
Python file, its ast facts cached per blob id + the rules for every recorded test; also without
the cache: every file parsed), the same through the CLI (``kernelcache
affected``, a fresh interpreter), and two peers in the same run: ``git diff --name-status``
alone (the floor) and ``pytest --collect-only`` of the test suite (what every pytest run pays).

    python benchmarks/impact_selection.py [--map PATH] [--repeat 7] [--whole-suite]

The map defaults to benchmarks/.out/impact-map.json (left there by benchmarks/impact_mutations.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--map", default=str(REPO / "benchmarks" / ".out" / "impact-map.json"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--whole-suite", action="store_true",
                    help="add every test pytest collects to the map (a record like its file's recorded tests, "
                         "or one that loaded nothing): selection at this repository's full size")
    args = ap.parse_args()
    try:
        imap = json.loads(Path(args.map).read_text())
    except (OSError, ValueError) as e:
        print(f"impact_selection: no usable map {args.map}: {e} (run benchmarks/impact_mutations.py first)")
        return 2
    map_path = args.map
    tmp = Path(tempfile.mkdtemp(prefix="kc-impact-sel-"))
    try:
        clone = tmp / "repo"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True,
                              check=True).stdout.strip()
        env = {**os.environ, "PYTHONPATH": str(clone)}
        collect_cmd = [sys.executable, "-m", "pytest", "-p", "no:kernelcache", "-p", "no:xdist", "--collect-only",
                       "-q", "tests"]
        if args.whole_suite:  # every collected test of the suite in the map (as a full recording has)
            ids = [ln.strip() for ln in subprocess.run(collect_cmd, cwd=clone, env=env, capture_output=True,
                                                       text=True).stdout.splitlines() if "::" in ln]
            ran_in = next((t.get("env", "") for t in imap["tests"].values()), "")  # the recording run's environment
            for nid in ids:
                f = nid.split("::")[0]
                like = next((t for t in imap["tests"].values() if t["file"] == f), None)
                imap["tests"].setdefault(nid, {**(like or {"kernels": [], "outcome": "passed", "duration": 0.0,
                                                          "early_skip": False, "skipped": False, "env": ran_in}),
                                               "nodeid": nid, "file": f})
                imap["files"].setdefault(f, {"reads": [], "dirs": [], "loaded": [], "commits": []})
        imap.update(commit=head, dirty={})  # format 2: every record carries its commit
        for t in imap["tests"].values():
            t["commit"] = head
        for f in imap["files"].values():
            f["commits"] = [head]
        for k in imap["kernels"].values():
            k["commit"] = head
        map_path = str(tmp / "impact-map.json")
        Path(map_path).write_text(json.dumps(imap))
        sys.path.insert(0, str(clone))  # the clone's kernelcache (its plugin files are in its tree)
        from kernelcache.impact.api import affected

        cuh = clone / "kernelcache/csrc/speculative_sampling/tree_sampling.cuh"
        cuh.write_text(cuh.read_text() + "// a pull request's edit\n")
        since = "HEAD"
        facts = tmp / "import-facts.json"  # the ast facts cache (per blob id)
        cold = timed(lambda: affected(clone, since, map_path), max(3, args.repeat // 2))  # parses every file
        res = affected(clone, since, map_path, graph_cache=facts)
        inproc = timed(lambda: affected(clone, since, map_path, graph_cache=facts), args.repeat)
        from kernelcache.impact import api as kapi
        from kernelcache.impact import witness as kwit
        from kernelcache.impact.select import TestInfo

        def with_witnesses() -> dict:  # the plugin's path: selection, then a witness per deselected test
            p = kapi.prepare(clone, since, map_path, kapi.project_rules(clone, map_path), graph_cache=facts)
            tests = [TestInfo(n, t.file) for n, t in (p.map.tests.items() if p.map else ())]
            sel = p.selector.select(tests)
            return kwit.build(p.selector, [t for t in tests if t.nodeid not in sel.selected])
        witnessed = timed(with_witnesses, args.repeat)
        wit = with_witnesses()
        verify = timed(lambda: kwit.verify(wit, clone), max(3, args.repeat // 2))
        broken = kwit.verify(wit, clone)
        cli = timed(lambda: subprocess.run([sys.executable, "-m", "kernelcache", "affected", "--since", since,
                                            "--map", map_path, "--json"], cwd=clone, env=env,
                                           capture_output=True, check=True), max(3, args.repeat // 2))
        git = timed(lambda: subprocess.run(["git", "diff", "--name-status", f"{since}...HEAD"], cwd=clone,
                                           capture_output=True, check=True), args.repeat)
        collect = timed(lambda: subprocess.run(collect_cmd, cwd=clone, env=env, capture_output=True), 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    n_sel = len(res["selected"])
    print(f"clone of {REPO} at HEAD {imap['commit'][:12]} + one line in tree_sampling.cuh: {len(res['changed'])} changed file(s); "
          f"{len(imap['tests'])} tests in {len(imap['files'])} files in the map "
          f"{map_path or '(none: everything runs)'}; selected {n_sel}, deselected {len(res['deselected'])}"
          + (f"; everything: {res['everything'][:100]}" if res["everything"] else ""))
    print(f"witnesses: {len(wit['tests'])} test(s), {len(wit['groups'])} group(s), "
          f"{sum(len(g['files']) for g in wit['groups'].values())} file blob(s); verify: {len(broken)} broken")
    rows = [("selection in-process (affected())", med(inproc)),
            ("  + a witness per deselected test", med(witnessed)),
            ("  kernelcache affected --verify (in-process)", med(verify)),
            ("  same, import facts not cached (parse all)", med(cold)),
            ("kernelcache affected (CLI, new interpreter)", med(cli)),
            ("peer: git diff --name-status", med(git)), ("peer: pytest --collect-only tests", med(collect))]
    for name, s in rows:
        print(f"{name:46s} {s:7.3f} s   {s / med(inproc):6.2f}x selection")
    print(f"goal <= 1 s: {'met' if med(inproc) <= 1.0 else 'NOT met'} (in-process median {med(inproc):.3f} s; "
          f"CLI {med(cli):.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
