"""`kernelcache lock check PATH [--json]`, `kernelcache lock update PATH`, `kernelcache warm --lock PATH`.

Why a module of its own: the lock commands are the CI side of the kernel lock (check on every
PR, update when a change is meant) and the node side (warm --lock at startup); they share
nothing with the cache commands but the settings and the table.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sized
from typing import Any, Callable

from .common import GlobalSubparsers, settings_of, table


def add_parsers(sub: Any) -> None:
    lk = sub.add_parser("lock", help="the kernel lock: check it against this checkout and toolchain, or update it")
    lsub = GlobalSubparsers(lk.add_subparsers(dest="lock_cmd", required=True))
    c = lsub.add_parser("check", help="exit 0 when the lock still describes the sources and toolchain here, "
                        "else 1 with one line per drifted kernel")
    c.add_argument("path", help="the kernel lock (e.g. kernels.lock)")
    c.add_argument("--json", action="store_true", help="one JSON object: per kernel, ok or the inputs that moved")
    c.set_defaults(fn=cmd_check)
    u = lsub.add_parser("update", help="re-resolve the locked kernels (built where the cache lacks them) and "
                        "rewrite their blocks, without running the app")
    u.add_argument("path", help="the kernel lock to rewrite")
    u.add_argument("-j", "--jobs", type=int, default=None, help="kernels resolved at once (default: as warm)")
    u.set_defaults(fn=cmd_update)


def add_warm_lock(w: argparse.ArgumentParser) -> None:
    """``warm --lock PATH``: load and validate the whole locked set (``lockfile.preload``)."""
    w.add_argument("--lock", default=None, metavar="PATH",
                   help="load and validate every kernel of this kernel lock (locked serving: a drift fails here)")
    plain: Callable[[argparse.Namespace], int] = w.get_default("fn")
    w.set_defaults(fn=lambda args: cmd_warm_lock(args) if args.lock else plain(args))


def cmd_check(args: argparse.Namespace) -> int:
    from ..lockfile import check

    found = check(args.path, settings_of(args))
    bad = [d for d in found if d.lines]
    if args.json:
        print(json.dumps({"lock": args.path, "ok": not bad, "kernels": [d.as_dict() for d in found]}, indent=1))
    else:
        for d in bad:
            print(f"{d.name}: {'; '.join(d.lines)}")
        for d in found:
            for n in d.notes:
                print(f"kernelcache: {d.name}: {n}", file=sys.stderr)
    return _status(bad, None if args.json else f"{args.path}: {len(found)} kernel(s) as locked")


def cmd_update(args: argparse.Namespace) -> int:
    from ..lockfile import update

    failed = update(args.path, settings_of(args), jobs=args.jobs)
    for line in failed:
        print(f"kernelcache: {line}", file=sys.stderr)
    return _status(failed, f"{args.path} updated")


def _status(failed: Sized, done: str | None) -> int:
    """The command's exit status: 1 when anything ``failed``; else 0, and ``done`` said (None: nothing)."""
    if not failed and done is not None:
        print(f"kernelcache: {done}")
    return 1 if failed else 0


def cmd_warm_lock(args: argparse.Namespace) -> int:
    from ..lockfile import preload

    results = preload(args.lock, settings_of(args), jobs=args.jobs)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
    else:
        print(table([[r.name, r.status, f"{r.seconds:.2f}s", (r.reason or "")[:100]] for r in results],
                    ["kernel", "status", "time", "reason"]))
        print(f"kernelcache: {len(results)} locked kernel(s) ready ({args.lock})")
    return 0
