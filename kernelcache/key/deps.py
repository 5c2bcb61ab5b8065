"""Recorded dependencies (level 2): every file the compiler read, and the check that they held.

Parsed from ``-MD`` depfiles (which unlike ``-MMD`` keep ``-isystem`` headers), each with its
content hash, plus "absent" probes so a new header that would shadow an old one is a miss.
Stat fields are only a fast pre-check; bytes decide. (The level-1 key is ``level1``, the
tool-free source key ``source_key``, path anchors ``anchors``.)
"""
from __future__ import annotations

import os
import re

from ..base.records import FrozenRecord, field
from ..host import toolchain
from ..host.anchors import anchor_path, anchors_for, resolve_anchor, root_relative
from .level1 import canonical_hash
from .plan import BuildPlan

_DEP_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


def parse_depfile(text: str) -> list[str]:
    """Parse a make-style depfile (gcc -MD / nvcc -MD) into the list of prerequisites."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    deps: list[str] = []
    for line in text.splitlines():
        idx = line.find(": ")  # target ends at the first ": " (paths contain no ": ")
        if idx < 0:
            if ":" not in line or line.rstrip().endswith(":"):
                continue
            idx = line.find(":")
        for tok in _DEP_TOKEN.findall(line[idx + 1:]):
            deps.append(tok.replace("\\ ", " ").replace("\\#", "#").replace("$$", "$"))
    return deps


def _stat_tuple(st: os.stat_result) -> list[int]:
    # ctime cannot be set back by a user, so an edit with a restored mtime still re-hashes.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def record_deps(plan: BuildPlan, dep_paths: list[str], exclude_dir: str) -> tuple[list[dict], list[str]]:
    """Hash every file the compiler read and compute absent probes for shadowing."""
    anchors = anchors_for(plan)
    source_set = {s.path for s in plan.sources}
    seen: dict[str, dict] = {}
    absent: set[str] = set()
    inc_dirs = plan.include_dirs
    dir_real: dict[str, str] = {}  # realpath per directory: ~30 dirs instead of ~300 files
    for raw in dep_paths:
        d, base = os.path.split(os.path.abspath(raw))
        rd = dir_real.get(d)
        if rd is None:
            rd = dir_real[d] = os.path.realpath(d)
        p = os.path.join(rd, base)
        if os.path.islink(p):
            p = os.path.realpath(p)
        if p in seen or p in source_set or p.startswith(exclude_dir + os.sep):
            continue
        try:
            st = os.stat(p)
            digest = toolchain.content_hash(p)
        except OSError:
            continue
        seen[p] = {"path": root_relative(p, raw, anchors), "xxh3": digest, "stat": _stat_tuple(st)}
        for k, d in enumerate(inc_dirs):
            if p.startswith(d + os.sep):
                rel = p[len(d) + 1:]
                for earlier in inc_dirs[:k]:
                    probe = os.path.join(earlier, rel)
                    if not os.path.exists(probe):
                        absent.add(anchor_path(probe, anchors))
                break
    deps = sorted(seen.values(), key=lambda d: d["path"])
    return deps, sorted(absent)


def entry_id(key1: str, deps: list[dict], absent: list[str]) -> str:
    return canonical_hash([key1, [[d["path"], d["xxh3"]] for d in deps], absent])[:32]


class DepCheck(FrozenRecord):
    """Did the recorded dependencies hold."""

    ok: bool
    reason: str = ""
    refreshed: dict[str, list[int]] = field(default_factory=dict)  # path -> new stat (bytes equal)
    n_stat: int = 0  # dependency files stat-ed
    n_trusted: int = 0  # files trusted through their installed distribution's RECORD
    retrust: bool = False  # a distribution's RECORD moved (reinstall): derive the trust again


def check_deps(deps: list[dict], absent: list[str], anchors: list[tuple[str, str]],
               stat_cache: dict[str, list[int]] | None = None, only_anchor: str | None = None,
               tolerate_missing_external: bool = False) -> DepCheck:
    """Validate recorded dependencies: equal stat -> trusted; otherwise re-hash; bytes decide.

    ``tolerate_missing_external``: for entries built on another host, an un-anchored header
    (the system's) that this host does not have is skipped, and so is one under an anchor this
    host lacks (``${CUDA}`` on a host without a toolkit); one it has must match.
    """
    refreshed: dict[str, list[int]] = {}
    stat_cache = stat_cache or {}
    for d in deps:
        if only_anchor and not d["path"].startswith(only_anchor):
            continue
        p = resolve_anchor(d["path"], anchors)
        try:
            st = os.stat(p)
        except OSError:
            if tolerate_missing_external and (not d["path"].startswith("${") or p.startswith("${")):
                continue  # un-anchored, or under an anchor this host lacks (no toolkit: ${CUDA})
            return DepCheck(False, f"header {d['path']} no longer exists")
        cur = _stat_tuple(st)
        if cur == d["stat"] or cur == stat_cache.get(d["path"]):
            continue
        try:
            digest = toolchain.content_hash(p)
        except OSError as e:
            return DepCheck(False, f"header {d['path']} unreadable: {e}")
        if digest != d.get("xxh3"):
            return DepCheck(False, f"header {d['path']} changed (content hash differs)")
        refreshed[d["path"]] = cur
    for a in absent:
        if only_anchor and not a.startswith(only_anchor):
            continue
        p = resolve_anchor(a, anchors)
        if tolerate_missing_external and (not a.startswith("${") or p.startswith("${")):
            continue
        if os.path.exists(p):
            return DepCheck(False, f"new header {a} shadows the one used before")
    return DepCheck(True, refreshed=refreshed, n_stat=len(deps))
