"""What changed: ``git diff REF...HEAD`` plus uncommitted and untracked files, renames split.

Why a rename is two changes: the old path disappears (tests that imported or listed it may
break) and the new one appears (it may shadow a header or be a new test file). Why a submodule
is opened: the superproject's diff names one gitlink for a bump or an edit inside it, while the
map records the headers inside (vendored CUTLASS, FlashInfer); its own diff says which. Every
failure (no git, not a repository, REF missing in a shallow clone, no merge base, a submodule
that changed but cannot be diffed) is a :class:`ChangeSet` with ``error`` set: the caller then
runs everything and says why.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

GIT_TIMEOUT_S = 60.0

ADDED, MODIFIED, DELETED = "added", "modified", "deleted"
GITLINK, NO_MODE = "160000", "000000"  # a submodule's entry in a tree; no entry (added / deleted)
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree: every git knows it
MAX_SUBMODULE_DEPTH = 8


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


def parse_raw(out: str) -> list[tuple[str, str, str, str, str, str, str]]:
    """``git diff --raw -z --no-abbrev`` output -> (status, old mode, new mode, old id, new id,
    path, new path) records (``new path`` only for a rename or copy)."""
    tokens = out.split("\0")
    recs = []
    i = 0
    while i < len(tokens) and tokens[i].startswith(":"):
        old_mode, new_mode, old_id, new_id, status = tokens[i][1:].split(" ", 4)
        if status[:1] in ("R", "C"):
            recs.append((status[:1], old_mode, new_mode, old_id, new_id, tokens[i + 1], tokens[i + 2]))
            i += 3
        else:
            recs.append((status[:1], old_mode, new_mode, old_id, new_id, tokens[i + 1], ""))
            i += 2
    return recs


def _join(a: str, b: str) -> str:
    return f"{a}, {b}" if b else a


def diff(root: Path | str, revs: Sequence[str], note: str = "", depth: int = 0) -> list[Change]:
    """``git diff REV [REV2]`` (one rev: against the working tree) as changes: a rename is a
    deletion and an addition, and a submodule whose commit moved, or whose working tree is
    dirty, is replaced by the files that changed inside it (:func:`submodule_changes`)."""
    out = git(root, "diff", "--raw", "-z", "--no-abbrev", "-M", "--ignore-submodules=none", *revs).stdout
    changes: list[Change] = []
    for status, old_mode, new_mode, old_id, new_id, path, new_path in parse_raw(out):
        if GITLINK in (old_mode, new_mode):
            if new_path:
                raise GitError(f"submodule {path} was renamed to {new_path}: its files' changes are not followed")
            if old_mode not in (GITLINK, NO_MODE):  # a file replaced by a submodule, or the reverse
                changes.append(Change(path, DELETED, note))
            if new_mode not in (GITLINK, NO_MODE):
                changes.append(Change(path, ADDED, note))
            old = old_id if old_mode == GITLINK else EMPTY_TREE
            new = (None if len(revs) == 1 else new_id) if new_mode == GITLINK else EMPTY_TREE
            changes += submodule_changes(Path(root), path, old, new, note, depth + 1)
        elif status == "R":
            changes.append(Change(path, DELETED, _join(f"renamed to {new_path}", note)))
            changes.append(Change(new_path, ADDED, _join(f"renamed from {path}", note)))
        elif status == "C":
            changes.append(Change(new_path, ADDED, _join(f"copied from {path}", note)))
        else:
            changes.append(Change(path, {"A": ADDED, "D": DELETED}.get(status, MODIFIED), note))
    return changes


def submodule_changes(root: Path, path: str, old: str, new: str | None, note: str = "",
                      depth: int = 1) -> list[Change]:
    """The files that differ inside the submodule at ``path`` between its commits ``old`` and
    ``new`` (None: its working tree, untracked files included; the empty tree for a submodule
    added or removed), prefixed with ``path``; nested submodules the same way. Why: the
    superproject's diff shows one gitlink, while the map records the headers inside it. Raises
    GitError (the caller then runs everything) when it cannot know: the submodule is not checked
    out, or a commit is missing from its object store (a shallow submodule clone)."""
    sub = root / path
    if depth > MAX_SUBMODULE_DEPTH:
        raise GitError(f"submodule {path} is nested more than {MAX_SUBMODULE_DEPTH} levels deep")
    if not (sub / ".git").exists():
        raise GitError(f"submodule {path} changed but is not checked out here, so the files that changed "
                       "inside it are unknown (`git submodule update --init --recursive`)")
    for rev in (old, new):
        if rev is not None and rev != EMPTY_TREE and not has_commit(sub, rev):
            raise GitError(f"submodule {path}: commit {rev[:12]} is not in its object store, so the files "
                           f"that changed inside it are unknown (`git -C {path} fetch` it, or check out "
                           "submodules with their history)")
    span = f"{_short(old)}..{_short(new) if new else 'working tree'}"
    inner = _join(f"in submodule {path}, {span}", note)
    found = diff(sub, [old] if new is None else [old, new], inner, depth)
    if new is None:
        for p in git(sub, "ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0"):
            if p:
                found.append(Change(p, ADDED, _join("untracked", inner)))
    return [Change(f"{path}/{c.path}", c.kind, c.note) for c in found]


def _short(rev: str) -> str:
    return "(none)" if rev == EMPTY_TREE else rev[:12]


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
        for c in diff(root, [cs.base, "HEAD"]):
            cs.add(c)
        for c in diff(root, ["HEAD"], "uncommitted"):
            cs.add(c)
        untracked = git(root, "ls-files", "--others", "--exclude-standard", "-z").stdout
        for p in untracked.split("\0"):
            if p:
                cs.add(Change(p, ADDED, "untracked"))
        for rev in sorted(set(also_since)):
            chs: dict[str, Change] = {}
            if rev and rev != cs.base:
                for c in diff(root, [rev], f"changed since {rev[:12]}, when the impact map recorded it"):
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
    """Tracked and untracked (not ignored) files of the working tree, those of its checked-out
    submodules included (a vendored header a kernel reads is a repository file); ``pattern``: a
    pathspec without ``/`` (a name glob such as ``*.py``), applied in each repository."""
    return sorted(_files(Path(root), "", pattern, 0))


def _files(top: Path, prefix: str, pattern: str, depth: int) -> set[str]:
    here = top / prefix if prefix else top
    args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    out = {prefix + p for p in git(here, *args, *(["--", pattern] if pattern else [])).stdout.split("\0") if p}
    for line in git(here, "ls-files", "-z", "--stage").stdout.split("\0"):
        mode, _, rest = line.partition(" ")
        if mode != GITLINK:
            continue
        sub = prefix + rest.partition("\t")[2]
        out.discard(sub)
        if depth < MAX_SUBMODULE_DEPTH and (top / sub / ".git").exists():
            out |= _files(top, sub + "/", pattern, depth + 1)
    return {p for p in out if os.path.exists(os.path.join(top, p))}
