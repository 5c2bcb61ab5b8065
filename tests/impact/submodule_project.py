"""The generated project (:mod:`.gen_project`) with a vendored library as a real git submodule:
``csrc/third_party/minilib`` (tags v1, v2, v3), whose ``include/minilib/clamp.h`` kernel ``kc``
reads through ``-I../third_party/minilib/include``, and whose ``VERSION`` a test reads.

Why under ``csrc/``: that is kernel ``kb``'s source root, so a change the selection does not look
into (one gitlink path) is "under kb's root, read by no compiler" — kb's tests run and kc's,
which read the header, would be deselected (issue 45, item 2).
"""
from __future__ import annotations

from pathlib import Path

from .gen_project import FILES
from .project import Project, Zygote, git
from .project import make_project as _make_project

SUB = "csrc/third_party/minilib"
HEADER = f"{SUB}/include/minilib/clamp.h"
VERSION = f"{SUB}/VERSION"
# tag -> (clamp.h, VERSION): v2 moves the header only, v3 the VERSION file only
TAGS = {"v1": ("#define MINILIB_CLAMP 0\n", "1\n"), "v2": ("#define MINILIB_CLAMP 1\n", "1\n"),
        "v3": ("#define MINILIB_CLAMP 0\n", "3\n")}

SUB_FILES = {
    **FILES,
    "kspecs.py": FILES["kspecs.py"].replace(
        'root=CSRC / "kern_c")', 'root=CSRC / "kern_c", include_dirs=["../third_party/minilib/include"])'),
    "csrc/kern_c/c.cc": FILES["csrc/kern_c/c.cc"].replace(
        '#include "c.cuh"\n', '#include "c.cuh"\n#include "minilib/clamp.h"\n').replace(
        "KC_EXPORT(fc, C_VALUE)", "KC_EXPORT(fc, C_VALUE + MINILIB_CLAMP)"),
    "tests/test_vendor.py": """\
from pathlib import Path

VERSION = Path(__file__).resolve().parents[1] / "csrc" / "third_party" / "minilib" / "VERSION"


def test_vendored_version():
    assert VERSION.read_text().strip() == "1"
""",
}
assert SUB_FILES["kspecs.py"] != FILES["kspecs.py"] and "MINILIB_CLAMP" in SUB_FILES["csrc/kern_c/c.cc"]

SUB_TESTS = {"tests/test_vendor.py::test_vendored_version"}


def init_repo(path: Path) -> None:
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "impact@example.invalid")
    git(path, "config", "user.name", "impact test")
    git(path, "config", "commit.gpgsign", "false")


def make_library(path: Path) -> Path:
    """The vendored library's own repository: one commit per tag."""
    (path / "include" / "minilib").mkdir(parents=True)
    init_repo(path)
    for tag, (header, version) in TAGS.items():
        (path / "include" / "minilib" / "clamp.h").write_text(header)
        (path / "VERSION").write_text(version)
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", tag)
        git(path, "tag", tag)
    return path


def add_submodule(proj: Path, url: Path, at: str, rev: str) -> None:
    """``git submodule add`` (a local path: file transport allowed for this command only)."""
    git(proj, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(url), at)
    checkout(proj / at, rev)


def checkout(sub: Path, rev: str) -> None:
    git(sub, "checkout", "-q", "-f", rev)


def make_project(base: Path, zygote: Zygote | None, files: dict[str, str] = SUB_FILES) -> Project:
    """The project with minilib at v1, committed (the first commit has no submodule yet)."""
    lib = make_library(base / "minilib")
    proj = _make_project(base, files, zygote)
    add_submodule(proj.path, lib, SUB, "v1")
    proj.commit("vendor minilib v1")
    return proj


def sub_worktree(proj: Project) -> dict[str, bytes | None]:
    """The submodule's uncommitted working-tree changes: each modified or untracked file's bytes
    (``None``: deleted). A superproject commit (``git add -A``) leaves them where they are, so
    they are part of the state the next edit starts from."""
    sub = proj.path / SUB
    out: dict[str, bytes | None] = {}
    for entry in git(sub, "status", "--porcelain", "-z", "--untracked-files=all").split("\0"):
        if entry:
            p = sub / entry[3:]
            out[entry[3:]] = p.read_bytes() if p.is_file() else None
    return out


def reset_hard(proj: Project, rev: str, sub_tree: dict[str, bytes | None] | None = None) -> None:
    """Back to ``rev``, the submodule's working tree included (``git reset --hard`` alone
    leaves it where it was), and then to ``sub_tree`` (:func:`sub_worktree` taken at ``rev``):
    the submodule's uncommitted changes that ``rev``'s state had (a checkout drops them)."""
    git(proj.path, "reset", "-q", "--hard", rev)
    git(proj.path, "clean", "-fdq")
    sub = proj.path / SUB
    want = git(proj.path, "ls-tree", rev, SUB).split()[2]
    checkout(sub, want)
    git(sub, "clean", "-fdq")
    for rel, data in (sub_tree or {}).items():
        if data is None:
            (sub / rel).unlink(missing_ok=True)
        else:
            (sub / rel).parent.mkdir(parents=True, exist_ok=True)
            (sub / rel).write_bytes(data)


__all__ = ["HEADER", "SUB", "SUB_FILES", "SUB_TESTS", "TAGS", "VERSION", "add_submodule", "checkout",
           "make_library", "make_project", "reset_hard", "sub_worktree"]
