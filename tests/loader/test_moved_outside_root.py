"""A header outside the kernel's root, in a moved checkout (issue 22).

Two checkouts on disk, real compiles. A file outside the root that the compiler reaches through
the root (``#include "../common/x.h"``, ``-I../common``) moves with the checkout: the entry
must be checked against the new checkout's copy (a different copy misses; an equal one hits),
never against the old checkout's copy that is still on disk.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import kernelcache as kc

KERNEL = """\
#include <tvm/ffi/function.h>
#include "k.h"
int64_t add(int64_t a, int64_t b) { return a + b + KC_OFFSET; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""
SPEC = """
import kernelcache as kc
spec = kc.KernelSpec(name="outside", sources=["add.cc"], root={root!r}, include_dirs={dirs!r},
                     functions={{"add": "Callable[[int, int], int]"}})
m = kc.load(spec)
print(m.add(1, 2), kc.stats()["hits"])
"""


def checkout(base: Path, offset: int, *, include: str = "../common/x.h", dirs: tuple[str, ...] = (".",),
             header_dir: str = "csrc/common", repo: Path | None = None) -> Path:
    """A checkout at ``base``: the kernel's root ``csrc/kern``, its header ``k.h`` including
    ``include``, which defines KC_OFFSET in ``header_dir``; a git repository at ``repo``."""
    root = base / "csrc" / "kern"
    root.mkdir(parents=True)
    (root / "add.cc").write_text(KERNEL)
    (root / "k.h").write_text(f'#include "{include}"\n')
    hdr = base / header_dir / "x.h"
    hdr.parent.mkdir(parents=True, exist_ok=True)
    hdr.write_text(f"#define KC_OFFSET {offset}\n")
    if repo is not None:
        subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    return root


def load(kc_env, root: Path, dirs: tuple[str, ...] = (".",)) -> tuple[int, int]:
    """(add(1, 2), hits) in a fresh process."""
    out = kc_env.run_py(SPEC.format(root=str(root), dirs=list(dirs))).stdout.split()
    return int(out[0]), int(out[1])


def moved(a: Path, b: Path, offset: int | None, header_dir: str = "csrc/common") -> None:
    """Copy checkout ``a`` to ``b`` (new paths, inodes, ctimes); ``a`` stays on disk."""
    shutil.copytree(a, b, symlinks=True)
    if offset is not None:
        (b / header_dir / "x.h").write_text(f"#define KC_OFFSET {offset}\n")


def the_deps(kc_env) -> list[list[str]]:
    """The recorded dependency paths of each entry of the kernel."""
    return [[d["path"] for d in json.loads((e / "manifest.json").read_text())["deps"]]
            for e in kc_env.entries("outside")]


def test_relative_include_outside_root_reads_the_moved_checkouts_copy(kc_env, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    checkout(a, 1, repo=a)
    assert load(kc_env, a / "csrc/kern") == (4, 0)
    moved(a, b, offset=5)  # the new checkout's x.h differs; the old one is still on disk
    kc_env.reset_counts()
    assert load(kc_env, b / "csrc/kern") == (8, 0)  # main's code: (4, 1), a stale hit
    assert kc_env.compiles() == 1
    # named through the repository holding the root
    assert all("${ROOT}/../../csrc/common/x.h" in deps for deps in the_deps(kc_env))
    code = SPEC.split("m = kc.load")[0] + "print(kc.explain(spec)['reason'])"
    # the old checkout still has its entry; explain from a third checkout names the header
    c = tmp_path / "c"
    moved(a, c, offset=9)
    reason = kc_env.run_py(code.format(root=str(c / "csrc/kern"), dirs=["."])).stdout
    assert "${ROOT}/../../csrc/common/x.h changed" in reason, reason


def test_relative_include_outside_root_equal_copy_hits(kc_env, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    checkout(a, 1, repo=a)
    assert load(kc_env, a / "csrc/kern") == (4, 0)
    moved(a, b, offset=None)
    shutil.rmtree(a)
    kc_env.reset_counts()
    assert load(kc_env, b / "csrc/kern") == (4, 1)
    assert kc_env.compiles() == 0


def test_include_dir_outside_root_moved_checkout_hits(kc_env, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    dirs = (".", "../common")
    checkout(a, 2, include="x.h", repo=a)
    assert load(kc_env, a / "csrc/kern", dirs) == (5, 0)
    moved(a, b, offset=None)
    kc_env.reset_counts()
    assert load(kc_env, b / "csrc/kern", dirs) == (5, 1)  # main's code: a miss (the -I path changed)
    assert kc_env.compiles() == 0
    (b / "csrc/common/x.h").write_text("#define KC_OFFSET 7\n")
    assert load(kc_env, b / "csrc/kern", dirs) == (10, 0)
    assert load(kc_env, a / "csrc/kern", dirs) == (5, 1)  # the old checkout still hits its own entry


def test_include_dir_outside_root_without_a_repository_moves_with_the_root(kc_env, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    dirs = (".", "../common")
    checkout(a, 2, include="x.h")
    assert load(kc_env, a / "csrc/kern", dirs) == (5, 0)
    moved(a, b, offset=3)
    kc_env.reset_counts()
    assert load(kc_env, b / "csrc/kern", dirs) == (6, 0)
    moved(a, tmp_path / "c", offset=None)
    assert load(kc_env, tmp_path / "c/csrc/kern", dirs) == (5, 1)


def test_relative_include_leaving_the_repository_is_checked_where_the_compiler_reads(kc_env, tmp_path):
    # the repository is proj/; the header lies beside it (shared/x.h), reached by ../../../shared
    a, b = tmp_path / "a", tmp_path / "b"
    checkout(a / "proj", 1, include="../../../shared/x.h", header_dir="../shared", repo=a / "proj")
    assert load(kc_env, a / "proj/csrc/kern") == (4, 0)
    moved(a, b, offset=6, header_dir="shared")
    kc_env.reset_counts()
    assert load(kc_env, b / "proj/csrc/kern") == (9, 0)  # main's code: (4, 1), a stale hit
    assert kc_env.compiles() == 1
    assert all("${ROOT}/../../../shared/x.h" in deps for deps in the_deps(kc_env))


def test_the_key_names_an_outside_include_dir_relative_to_the_root(tmp_path):
    from kernelcache.host import anchors

    for name in ("a", "b"):
        checkout(tmp_path / name, 1, include="x.h", repo=tmp_path / name)
    specs = [kc.KernelSpec(name="outside", sources=["add.cc"], root=tmp_path / n / "csrc/kern",
                           include_dirs=[".", "../common"], functions={}) for n in ("a", "b")]
    texts = [anchors.anchor_text(f"-I{s.abspath('../common')}", anchors.anchors_of(s)) for s in specs]
    assert texts == ["-I${ROOT}/../../csrc/common"] * 2
