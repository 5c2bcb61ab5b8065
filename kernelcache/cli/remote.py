"""Fleet-cache commands: push entries already built here; ls, verify, trim, keygen on a remote."""
from __future__ import annotations

import json
import sys

from .common import parse_age, settings_of, specs, table


def _remote(args):
    from ..storage.remote import open_remote

    s = settings_of(args)
    if not s.remote:
        raise ValueError("no remote: pass --remote URL or set KERNELCACHE_REMOTE")
    if s.remote_mode == "off":
        s = s.replace(remote_mode="read")
    return s, open_remote(s)


def cmd_push(args) -> int:
    """Upload the local entries of the named (default: all shipped) kernels that load here."""
    from ..loader import push

    s = settings_of(args)
    if not s.remote_writable:
        print("push: needs a remote in readwrite mode (--remote URL --remote-mode readwrite)", file=sys.stderr)
        return 2
    rows, failed = [], 0
    for name, spec in specs(args.names).items():
        try:
            r = push(spec, s)
        except Exception as e:  # noqa: BLE001 - reported per kernel
            r = {"entry_id": "", "status": "failed", "reason": f"{type(e).__name__}: {e}"}
        rows.append([name, r["entry_id"][:12], r["status"], r.get("reason", "")[:80]])
        failed += r["status"] == "failed"
    print(table(rows, ["kernel", "entry", "status", "reason"]) if rows else "nothing to push")
    return 1 if failed else 0


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
    from ..storage.remote.ops import remote_verify

    _, rc = _remote(args)
    bad = 0
    for r in remote_verify(rc):
        ok = r.get("ok", False)
        bad += not ok
        print(f"{r.get('name')}  {str(r.get('entry_id', ''))[:12]}  {'ok' if ok else 'BAD: ' + str(r.get('reason'))}")
    print(f"{bad} bad entr{'y' if bad == 1 else 'ies'}")
    return 1 if bad else 0


def cmd_remote_trim(args) -> int:
    from ..storage.remote.ops import remote_trim

    _, rc = _remote(args)
    removed = remote_trim(rc, args.max_age)
    for p in removed:
        print(f"removed {p}")
    print(f"{len(removed)} object{'s' if len(removed) != 1 else ''} removed")
    return 0


def cmd_remote_keygen(args) -> int:
    from ..storage.remote.ops import keygen

    keygen(args.private, args.public)
    print(f"wrote {args.private} (KERNELCACHE_REMOTE_SIGNING_KEY, writers) and {args.public} "
          "(KERNELCACHE_REMOTE_VERIFY_KEYS, readers)")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("push", help="upload locally built entries to the fleet cache (readwrite)")
    p.add_argument("names", nargs="*", help="kernel names (default: all shipped)")
    p.set_defaults(fn=cmd_push)
    r = sub.add_parser("remote", help="inspect or maintain the fleet cache")
    rs = r.add_subparsers(dest="remote_cmd", required=True)
    ls = rs.add_parser("ls", help="list the remote's entries")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_remote_ls)
    v = rs.add_parser("verify", help="re-hash every blob the remote holds against its manifests")
    v.set_defaults(fn=cmd_remote_verify)
    t = rs.add_parser("trim", help="delete entries older than an age (file:// remotes; stores use lifecycle rules)")
    t.add_argument("--max-age", type=parse_age, required=True, help="e.g. 30d")
    t.set_defaults(fn=cmd_remote_trim)
    k = rs.add_parser("keygen", help="write an Ed25519 key pair for signed manifests")
    k.add_argument("private")
    k.add_argument("public")
    k.set_defaults(fn=cmd_remote_keygen)
