"""Selection cost of test impact on this repository (goal: <= 1 s), against the costs around it.

Measures, on this checkout: ``kernelcache.impact.api.affected`` in-process (git diff + map load
+ import graph of every Python file + rules), the same as the CLI (``kernelcache affected``, a
fresh interpreter), and two peers measured in the same run: ``git diff --name-status`` alone
(the floor) and ``pytest --collect-only`` of the test suite (what every pytest run pays anyway).

    python benchmarks/impact_selection.py [--map PATH] [--since REF] [--repeat 7]

The map defaults to benchmarks/.out/impact-map.json (left there by benchmarks/impact_mutations.py);
without one, selection runs everything (the cost is then git and the graph only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


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
    ap.add_argument("--since", default="HEAD~5")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    from kernelcache.impact.api import affected

    map_path = args.map if Path(args.map).exists() else None
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = affected(REPO, args.since, map_path)
    inproc = timed(lambda: affected(REPO, args.since, map_path), args.repeat)
    cli = timed(lambda: subprocess.run([sys.executable, "-m", "kernelcache", "affected", "--since", args.since,
                                        *(["--map", map_path] if map_path else []), "--json"], cwd=REPO, env=env,
                                       capture_output=True, check=True), max(3, args.repeat // 2))
    git = timed(lambda: subprocess.run(["git", "diff", "--name-status", f"{args.since}...HEAD"], cwd=REPO,
                                       capture_output=True, check=True), args.repeat)
    collect = timed(lambda: subprocess.run([sys.executable, "-m", "pytest", "-p", "no:kernelcache", "-p", "no:xdist",
                                            "--collect-only", "-q", "tests"], cwd=REPO, env=env,
                                           capture_output=True), 2)
    med = statistics.median
    n_sel = len(res["selected"])
    print(f"repo {REPO} since {args.since}: {len(res['changed'])} changed file(s); map "
          f"{map_path or '(none: everything runs)'}; selected {n_sel}, deselected {len(res['deselected'])}"
          + (f"; everything: {res['everything'][:100]}" if res["everything"] else ""))
    rows = [("selection in-process (affected())", med(inproc)), ("kernelcache affected (CLI, new interpreter)", med(cli)),
            ("peer: git diff --name-status", med(git)), ("peer: pytest --collect-only tests", med(collect))]
    for name, s in rows:
        print(f"{name:46s} {s:7.3f} s   {s / med(inproc):6.2f}x selection")
    print(f"goal <= 1 s: {'met' if med(inproc) <= 1.0 else 'NOT met'} (in-process median {med(inproc):.3f} s; "
          f"CLI {med(cli):.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
