"""What every command shares: the settings it runs with, spec lookup, a plain-text table."""
from __future__ import annotations

import argparse
import re
from typing import Any

from ..base.settings import REMOTE_MODES, Settings


def add_global_flags(p: argparse.ArgumentParser, after_command: bool) -> None:
    """The flags every command takes, before (``kernelcache --remote URL push``) or after the
    command (``kernelcache push --remote URL``). After it they default to SUPPRESS, so a flag
    given before the command is not reset by the subcommand's parser."""
    d = argparse.SUPPRESS if after_command else None
    p.add_argument("--remote", default=d, metavar="URL",
                   help="fleet cache URL (s3://, gs://, az://, file://); default: KERNELCACHE_REMOTE")
    p.add_argument("--remote-mode", choices=REMOTE_MODES, default=d,
                   help="default: KERNELCACHE_REMOTE_MODE, else read when a remote is set")
    p.add_argument("--cache-dir", default=d, metavar="DIR", help="the cache directory; default: KERNELCACHE_DIR")


class GlobalSubparsers:
    """``add_subparsers()`` whose every command also accepts the global flags after its name."""

    def __init__(self, sub: Any):
        self._sub = sub

    def add_parser(self, name: str, **kw: Any) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help"))
        p = self._sub.add_parser(name, **kw)
        add_global_flags(p, after_command=True)
        return p


def settings_of(args: argparse.Namespace) -> Settings:
    """The environment's settings with the command line's global flags on top (the remote's
    URL and mode layered over the environment's; ``RemoteSettings`` owns the default rule)."""
    overrides = {}
    if getattr(args, "cache_dir", None):
        overrides["cache_dir"] = args.cache_dir
    return Settings.from_env(remote_url=getattr(args, "remote", None), remote_mode=getattr(args, "remote_mode", None),
                             **overrides)


def specs(names: list[str], settings: Settings | None = None):
    """The shipped kernels' specs (all, or ``names``), their headers found for ``settings``."""
    from ..kernels import shipped_specs

    return shipped_specs(names or None, settings)


def table(rows: list[list[Any]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(lines)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.I)


def parse_size(s: str) -> int:
    m = _SIZE.match(s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 500M, 10G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower()))


def parse_age(s: str) -> float:
    m = _AGE.match(s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad age {s!r} (e.g. 12h, 30d)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[(m.group(2) or "").lower()]
