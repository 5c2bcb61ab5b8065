"""What every command shares: the settings it runs with, spec lookup, a plain-text table."""
from __future__ import annotations

import argparse
import re
from typing import Any

from ..settings import Settings


def settings_of(args: argparse.Namespace) -> Settings:
    """The environment's settings with the command line's global flags on top."""
    s = Settings.from_env()
    url, mode = getattr(args, "remote", None), getattr(args, "remote_mode", None)
    if url:
        s = s.replace(remote=url, remote_mode=mode or (s.remote_mode if s.remote_mode != "off" else "read"))
    elif mode:
        s = s.replace(remote_mode=mode if s.remote else "off")
    return s


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
