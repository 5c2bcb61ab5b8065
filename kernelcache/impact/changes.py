"""What changed: ``git diff REF...HEAD`` plus uncommitted and untracked files, renames split.

Why a rename is two changes: the old path disappears (tests that imported or listed it may
break) and the new one appears (it may shadow a header or be a new test file). Every failure
(no git, not a repository, REF missing in a shallow clone, no merge base) is a
:class:`ChangeSet` with ``error`` set: the caller then runs everything and says why.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

GIT_TIMEOUT_S = 60.0

ADDED, MODIFIED, DELETED = "added", "modified", "deleted"


class GitError(Exception):
    pass


@dataclass(frozen=True)
class Change:
    """One changed path (repository-relative, ``/``-separated)."""

    path: str
    kind: str  # added | modified | deleted
    note: str = ""  # "renamed to x" / "renamed from x" / "uncommitted" / "untracked"

    def describe(self) -> str:
        return f"{self.path} ({self.kind}{', ' + self.note if self.note else ''})"


@dataclass
class ChangeSet:
    """The changed files of a working tree against a base, or the reason they are unknown."""

    root: Path | None
    since: str
    base: str = ""  # merge-base commit of REF and HEAD
    head: str = ""
    changes: dict[str, Change] = field(default_factory=dict)  # since the merge base, uncommitted, untracked
    error: str | None = None
    # commit -> what changed between it and the working tree (impact-map records made there)
    since_commit: dict[str, dict[str, Change]] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.error is None

    def add(self, c: Change) -> None:
        if bytecode(c.path):
            return
        cur = self.changes.get(c.path)
        if cur is None or (cur.kind == MODIFIED and c.kind != MODIFIED):
            self.changes[c.path] = c

    def paths(self) -> set[str]:
        return set(self.changes)

    def union(self, commits: "set[str] | None" = None) -> dict[str, Change]:
        """The changes against the base plus those since each of ``commits`` (None: all)."""
        out = dict(self.changes)
        for c, chs in self.since_commit.items():
            if commits is None or c in commits:
                for p, ch in chs.items():
                    cur = out.get(p)
                    if cur is None or (cur.kind == MODIFIED and ch.kind != MODIFIED):
                        out[p] = ch
        return out


def git(root: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} did not finish in {GIT_TIMEOUT_S:.0f}s") from None
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def repo_root(start: Path | str) -> Path:
    """The top of the git working tree containing ``start`` (GitError when there is none)."""
    return Path(git(start, "rev-parse", "--show-toplevel").stdout.strip())


def head_commit(root: Path | str) -> str:
    try:
        return git(root, "rev-parse", "--verify", "--quiet", "HEAD").stdout.strip()
    except GitError:
        return ""


def has_commit(root: Path | str, rev: str) -> bool:
    return bool(rev) and git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}",
                             check=False).returncode == 0


def parse_name_status(out: str, note: str = "") -> list[Change]:
    """``git diff --name-status -z -M`` output -> changes (a rename is a deletion + an addition)."""
    tokens = out.split("\0")
    out_changes: list[Change] = []
    i = 0
    while i < len(tokens) and tokens[i]:
        status = tokens[i]
        code = status[:1]
        if code in ("R", "C"):
            old, new = tokens[i + 1], tokens[i + 2]
            i += 3
            if code == "R":
                out_changes.append(Change(old, DELETED, _join(f"renamed to {new}", note)))
            out_changes.append(Change(new, ADDED, _join(f"{'renamed' if code == 'R' else 'copied'} from {old}", note)))
            continue
        path = tokens[i + 1]
        i += 2
        kind = {"A": ADDED, "D": DELETED}.get(code, MODIFIED)
        out_changes.append(Change(path, kind, note))
    return out_changes


def _join(a: str, b: str) -> str:
    return f"{a}, {b}" if b else a


def changed_files(start: Path | str, since: str, also_since: Iterable[str] = ()) -> ChangeSet:
    """Files changed between ``since`` (through its merge base with HEAD) and the working tree,
    untracked files included; ``also_since``: more bases (the commits impact-map records were
    made at), each diffed against the working tree into ``since_commit``. Never raises for git
    problems."""
    cs = ChangeSet(None, since)
    try:
        cs.root = repo_root(start)
    except GitError as e:
        cs.error = f"not a git working tree ({e})"
        return cs
    root = cs.root
    try:
        cs.head = head_commit(root)
        if not has_commit(root, since):
            cs.error = (f"{since!r} is not a commit in this clone (a shallow clone or a branch that was "
                        f"not fetched? `git fetch --depth=... origin {since}`)")
            return cs
        mb = git(root, "merge-base", since, "HEAD", check=False)
        if mb.returncode != 0 or not mb.stdout.strip():
            cs.error = (f"no merge base of {since!r} and HEAD in this clone (a shallow clone? fetch more "
                        "history: `git fetch --deepen=...` or `--unshallow`)")
            return cs
        cs.base = mb.stdout.split()[0]
        committed = git(root, "diff", "--name-status", "-z", "-M", cs.base, "HEAD").stdout
        for c in parse_name_status(committed):
            cs.add(c)
        for c in parse_name_status(git(root, "diff", "--name-status", "-z", "-M", "HEAD").stdout, "uncommitted"):
            cs.add(c)
        untracked = git(root, "ls-files", "--others", "--exclude-standard", "-z").stdout
        for p in untracked.split("\0"):
            if p:
                cs.add(Change(p, ADDED, "untracked"))
        for rev in sorted(set(also_since)):
            chs: dict[str, Change] = {}
            if rev and rev != cs.base:
                out = git(root, "diff", "--name-status", "-z", "-M", rev).stdout
                for c in parse_name_status(out, f"changed since {rev[:12]}, when the impact map recorded it"):
                    if not bytecode(c.path):
                        chs[c.path] = c
            cs.since_commit[rev] = chs
    except GitError as e:
        cs.error = str(e)
    return cs


def bytecode(path: str) -> bool:
    """Python's bytecode cache (``__pycache__/*.pyc``, pytest's rewritten ones too), written by
    every run where no ``.gitignore`` names it, and committed by a careless ``git add -A``:
    derived from its source, which the interpreter checks at import (a ``.pyc`` under
    ``__pycache__`` is never imported without it), so it never changes an outcome by itself."""
    return path.endswith(".pyc") and "__pycache__" in path.split("/")


def repo_files(root: Path | str, pattern: str = "") -> list[str]:
    """Tracked and untracked (not ignored) files of the working tree, ``pattern`` a pathspec."""
    args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    if pattern:
        args += ["--", pattern]
    out = git(root, *args).stdout
    base = str(root)
    return sorted({p for p in out.split("\0") if p and os.path.exists(os.path.join(base, p))})
