"""`kernelcache affected --since REF [--map PATH] [--json]`: which tests a change can affect.

Why a CLI next to the plugin option: CI decides *before* starting (expensive) GPU runners
whether they have anything to run, and a reviewer asks "what would run?" without pytest. It
works at the map's granularity (recorded test ids; test files the map has never seen are listed
whole) and never imports pytest; the plugin then selects per collected test on the runner.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parsers(sub) -> None:
    a = sub.add_parser("affected", help="tests a change since REF can affect (test impact map + git diff)")
    a.add_argument("--since", metavar="REF", help="base: git diff REF...HEAD + uncommitted (required unless --verify)")
    a.add_argument("--map", default=None, metavar="PATH",
                   help="impact map (default: $KERNELCACHE_IMPACT_MAP); without one everything runs")
    a.add_argument("--root", default=".", help="a directory inside the repository (default: .)")
    a.add_argument("--json", action="store_true")
    a.add_argument("--files", action="store_true", help="print only the test files to run, one per line")
    a.add_argument("--verify", metavar="REPORT", default=None,
                   help="recompute the witnesses of the tests a run deselected (its --kc-report-json) on this tree "
                        "and environment: exit 1 naming each that no longer holds")
    a.set_defaults(fn=cmd_affected)


def cmd_affected(args: argparse.Namespace) -> int:
    if args.verify:
        return cmd_verify(args.verify, Path(args.root), args.json)
    if not args.since:
        print("kernelcache affected: --since REF is required (or --verify REPORT)")
        return 2
    from ..base.settings import kc_environ
    from ..impact.api import affected
    from .common import settings_of

    map_path = args.map or kc_environ().get("KERNELCACHE_IMPACT_MAP") or None
    from ..impact.api import run_outputs

    s = settings_of(args)
    out = affected(Path(args.root), args.since, map_path,
                   graph_cache=Path(s.cache_dir) / "impact" / "import-facts.json", outputs=run_outputs(s))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    if args.files:
        for f in out["files"]:
            print(f)
        return 0
    print(f"affected since {args.since} (merge base {out['base'][:12] or '?'}): {len(out['changed'])} changed "
          f"file(s); {out['n_selected']} recorded test(s) selected, {out['n_deselected']} deselected, "
          f"{len(out['new_files'])} test file(s) to run whole ({out['seconds']:.2f}s)")
    for c in out["changed"]:
        print(f"  changed: {c}")
    if out["everything"]:
        print(f"running everything: {out['everything']}")
        return 0
    for nodeid, why in out["selected"].items():
        print(f"{nodeid}  # {why}")
    for f, why in out["new_files"].items():
        print(f"{f}  # {why}")
    return 0


def cmd_verify(report: str, root: Path, as_json: bool) -> int:
    """Replay a run's witnesses: 0 when each still holds, 1 naming those that do not, 2 when
    the report has none."""
    from ..impact import witness

    try:
        w = witness.from_report(report)
    except ValueError as e:
        print(f"kernelcache affected --verify: {e}")
        return 2
    broken = witness.verify(w, root)
    n = len(w.get("tests") or {})
    if as_json:
        print(json.dumps({"report": report, "witnesses": n, "broken": broken}, indent=1))
    else:
        for line in broken:
            print(line)
        print(f"{n - len(broken)} of {n} witness(es) hold" + (f"; {len(broken)} no longer hold" if broken else ""))
    return 1 if broken else 0
