"""Fleet-cache commands: push entries already in the local cache; ls, verify, trim, keygen.

Commands that change the remote (push, ``verify --fix``, trim) need ``readwrite`` and exit 2
without it, before any request; trim says what it deletes and has ``--dry-run``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import parse_age, settings_of, table

_READWRITE = "needs a remote in readwrite mode (--remote URL --remote-mode readwrite)"


def _quiet(url: str, reason: str) -> None:
    """An outage is reported once, by the command's own error line (no RemoteDownWarning too)."""


def _remote(args, writable: bool = False):
    """(settings, client), or (settings, None) when ``writable`` is needed and not given."""
    from ..storage.remote import open_remote

    s = settings_of(args)
    if not s.remote.url:
        raise ValueError("no remote: pass --remote URL or set KERNELCACHE_REMOTE")
    if writable and not s.remote_writable:
        return s, None
    if not s.remote_enabled:  # inspecting a remote needs no mode: read it
        s = s.replace(remote=s.remote.replace(mode="read"))
    return s, open_remote(s, on_down=_quiet)


def cmd_push(args) -> int:
    """Upload the entries of the local cache (all, or those of the named kernels). Never builds."""
    from ..lookup.push import push

    s = settings_of(args)
    if not s.remote_writable:
        print(f"push: {_READWRITE}", file=sys.stderr)
        return 2
    from ..base import events

    with events.logging_to(s.log or "0"):  # the table below is the report: no progress line per entry
        results = push(args.names or None, s)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
    else:
        rows = [[r.name, r.entry_id[:12], r.status, r.reason[:80]] for r in results]
        print(table(rows, ["kernel", "entry", "status", "reason"]) if rows else "nothing to push: the local cache "
              f"{s.cache_dir} holds no entry built here")
    return 1 if any(r.status == events.Upload.FAILED for r in results) else 0


def cmd_remote_ls(args) -> int:
    from ..storage.remote.ops import remote_ls

    _, rc = _remote(args)
    items = remote_ls(rc)
    if args.json:
        print(json.dumps(items, indent=1, default=str))
        return 0
    print(f"remote: {rc.url}")
    rows = [[i.get("name"), str(i.get("entry_id", ""))[:12], str(i.get("skey", ""))[:12], i.get("size", ""),
             i.get("last_modified", "")] for i in items]
    print(table(rows, ["kernel", "entry", "source key", "size", "written"]) if rows else "(empty)")
    return 0


def cmd_remote_verify(args) -> int:
    from ..storage.remote.ops import remote_fix, remote_verify

    s, rc = _remote(args, writable=args.fix)
    if rc is None:
        print(f"remote verify --fix: {_READWRITE}", file=sys.stderr)
        return 2
    rows = remote_verify(rc)
    bad = [r for r in rows if not r.get("ok")]
    cells = [[r.get("name"), str(r.get("entry_id", ""))[:12],
              "ok" if r.get("ok") else f"BAD: {r.get('reason')}: {r.get('detail')}"] for r in rows]
    print(f"remote: {rc.url}")
    print(table(cells, ["kernel", "entry", "state"]) if cells else "(empty)")
    print(f"{len(bad)} bad entr{'y' if len(bad) == 1 else 'ies'}")
    if not args.fix or not bad:
        return 1 if bad else 0
    actions = remote_fix(rc, bad, _local_blobs(s))
    for a in actions:
        print(f"{a['action']}: {a['key']} ({a['detail']})")
    left = sum(a["action"] == "left" for a in actions)
    print(f"{len(actions) - left} fixed, {left} left as they are")
    return 1 if left else 0


def _local_blobs(s) -> dict[str, Path]:
    """sha256 -> a binary of the local cache with exactly those bytes (re-hashed, not trusted)."""
    from ..storage.local import LocalStore
    from ..storage.remote.refs import file_digest

    out: dict[str, Path] = {}
    for e in LocalStore(s).entries():
        try:
            sha, size = file_digest(e.so_path)
        except OSError:
            continue
        if (sha, size) == (e.manifest.so_sha256, e.manifest.so_size):
            out[sha] = Path(e.so_path)
    return out


def cmd_remote_trim(args) -> int:
    from ..storage.remote.ops import remote_trim

    _, rc = _remote(args, writable=not args.dry_run)
    if rc is None:
        print(f"remote trim: {_READWRITE}; --dry-run lists what it would delete", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removing"
    if args.dry_run:
        removed = remote_trim(rc, args.max_age, dry_run=True)
        for p in removed:
            print(f"{verb} {p}")
    else:
        removed = remote_trim(rc, args.max_age, on_remove=lambda p: print(f"{verb} {p}", flush=True))
    n = len(removed)
    print(f"{n} object{'s' if n != 1 else ''} {'would be removed (dry run)' if args.dry_run else 'removed'}")
    return 0


def cmd_remote_keygen(args) -> int:
    from ..storage.remote.ops import keygen

    keygen(args.private, args.public)
    print(f"wrote {args.private} (KERNELCACHE_REMOTE_SIGNING_KEY, writers) and {args.public} "
          "(KERNELCACHE_REMOTE_VERIFY_KEYS, readers)")
    return 0


def add_parsers(sub) -> None:
    from .common import GlobalSubparsers

    p = sub.add_parser("push", help="upload entries already in the local cache to the fleet cache "
                                    "(readwrite; never builds)")
    p.add_argument("names", nargs="*", help="kernel names as the cache records them (default: every entry)")
    p.add_argument("--json", action="store_true", help="one JSON object per entry")
    p.set_defaults(fn=cmd_push)
    r = sub.add_parser("remote", help="inspect or maintain the fleet cache")
    rs = GlobalSubparsers(r.add_subparsers(dest="remote_cmd", required=True))
    ls = rs.add_parser("ls", help="list the remote's entries")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(fn=cmd_remote_ls)
    v = rs.add_parser("verify", help="re-hash every blob the remote holds against its manifests")
    v.add_argument("--fix", action="store_true", help="(readwrite) re-upload damaged or missing blobs from the "
                   "local cache; delete envelopes nobody here can repair and damaged unreferenced blobs")
    v.set_defaults(fn=cmd_remote_verify)
    t = rs.add_parser("trim", help="delete entries older than an age (readwrite; file:// remotes; object "
                                   "stores use lifecycle rules)")
    t.add_argument("--max-age", type=parse_age, required=True, help="e.g. 30d")
    t.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    t.set_defaults(fn=cmd_remote_trim)
    k = rs.add_parser("keygen", help="write an Ed25519 key pair for signed manifests")
    k.add_argument("private", help="path of the private key to write (0600)")
    k.add_argument("public", help="path of the public key to write")
    k.set_defaults(fn=cmd_remote_keygen)
