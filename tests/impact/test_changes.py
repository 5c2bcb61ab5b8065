"""Changed files from real git repositories: committed, uncommitted, untracked, renamed,
deleted; and the fallbacks when REF cannot be used (missing, shallow clone, not a repo)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from kernelcache.impact.changes import ADDED, DELETED, MODIFIED, changed_files


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def repo(tmp_path: Path) -> Path:
    r = tmp_path / "r"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.invalid")
    git(r, "config", "user.name", "t")
    for name, text in {"a.py": "A = 1\n", "b.h": "#define B 1\n", "c.md": "c\n", "d.txt": "keep\n" * 20}.items():
        (r / name).write_text(text)
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def test_committed_uncommitted_untracked_renamed_deleted(tmp_path):
    r = repo(tmp_path)
    git(r, "checkout", "-q", "-b", "feature")
    (r / "a.py").write_text("A = 2\n")
    git(r, "mv", "d.txt", "e.txt")
    git(r, "commit", "-qam", "edit a, rename d")
    (r / "b.h").write_text("#define B 2\n")  # uncommitted
    (r / "c.md").unlink()  # uncommitted deletion
    (r / "new.py").write_text("")  # untracked
    cs = changed_files(r, "main")
    assert cs.known, cs.error
    kinds = {p: c.kind for p, c in cs.changes.items()}
    assert kinds == {"a.py": MODIFIED, "d.txt": DELETED, "e.txt": ADDED, "b.h": MODIFIED, "c.md": DELETED,
                     "new.py": ADDED}
    assert "renamed to e.txt" in cs.changes["d.txt"].note and "renamed from d.txt" in cs.changes["e.txt"].note
    assert cs.changes["new.py"].note == "untracked" and "uncommitted" in cs.changes["b.h"].note
    assert cs.base == git(r, "rev-parse", "main").strip()


def test_three_dot_diff_ignores_changes_on_the_base_branch(tmp_path):
    r = repo(tmp_path)
    git(r, "checkout", "-q", "-b", "feature")
    (r / "a.py").write_text("A = 3\n")
    git(r, "commit", "-qam", "feature edit")
    git(r, "checkout", "-q", "main")
    (r / "b.h").write_text("#define B 9\n")
    git(r, "commit", "-qam", "main moved on")
    git(r, "checkout", "-q", "feature")
    cs = changed_files(r, "main")
    assert set(cs.changes) == {"a.py"}


def test_missing_ref_is_a_reason_not_an_exception(tmp_path):
    r = repo(tmp_path)
    cs = changed_files(r, "origin/no-such-branch")
    assert not cs.known and "not a commit in this clone" in cs.error


def test_shallow_clone_without_the_base(tmp_path):
    r = repo(tmp_path)
    (r / "a.py").write_text("A = 5\n")
    git(r, "commit", "-qam", "second")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{r}", str(clone))
    cs = changed_files(clone, "HEAD~1")
    assert not cs.known and "shallow clone" in cs.error


def test_not_a_repository(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    cs = changed_files(d, "HEAD")
    assert not cs.known and "not a git working tree" in cs.error
