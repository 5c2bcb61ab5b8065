"""Anchors: machine-specific path prefixes written as ``${ROOT}``, ``${TVM_FFI}``, ``${SITE}``.

Keys and recorded dependencies name files relative to these anchors, so a checkout or a venv
that moved (another host of the fleet, a CI runner) computes the same keys and finds its entries.

Files outside the kernel's root that move with it are named relative to the root too
(``${ROOT}/../common/x.h``): everything in the repository holding the root (the nearest
directory above it with ``.git``), and the spec's relative include dirs that leave the root.
Why: such a file is reached through the root (``-I../common``, ``#include "../common/x.h"``), so
in a moved checkout the compiler reads the new checkout's copy; an absolute record would keep
checking the old checkout's copy (a stale hit while the old one is still on disk).
"""
from __future__ import annotations

import os

from . import process_state, toolchain
from .plan import ROOT, BuildPlan
from .spec import KernelSpec

TVM_FFI = "${TVM_FFI}"
SITE = "${SITE}"  # site-packages: header-only dependencies (FlashInfer) relocate with the venv


# -- anchors ---------------------------------------------------------------------------------
def anchors_of(spec: KernelSpec) -> list[tuple[str, str]]:
    """(anchor, realpath prefix), longest prefix first.

    ``${SITE}`` is the site-packages directory holding tvm-ffi (where header-only packages
    such as FlashInfer live too); taken from tvm-ffi's path because asking sysconfig costs
    milliseconds per process.
    """
    tvm_dir = toolchain.tvm_ffi_paths().package_dir
    root = str(spec.root)
    pairs = [(ROOT, root), (TVM_FFI, tvm_dir), (SITE, os.path.dirname(tvm_dir))]
    pairs += moving_anchors(spec)
    return sorted(pairs, key=lambda p: -len(p[1]))


def moving_anchors(spec: KernelSpec) -> list[tuple[str, str]]:
    """(``${ROOT}/../..``, realpath) for each of :func:`moving_dirs` (memoised per process)."""
    root = str(spec.root)
    memo = (root, *spec.include_dirs, "", *spec.system_include_dirs)
    hit = _moving.get(memo)
    if hit is None:
        hit = _moving[memo] = [(ROOT + "/" + os.path.relpath(d, root).replace(os.sep, "/"), d)
                               for d in moving_dirs(spec)]
    return hit


def moving_dirs(spec: KernelSpec) -> list[str]:
    """Directories outside the root that move with it: the repository holding the root, and
    relative include dirs that leave the root (where no repository holds them)."""
    root = str(spec.root)
    repo = project_root(root)
    out = [repo] if repo and repo != root else []
    for d in (*spec.include_dirs, *spec.system_include_dirs):
        if os.path.isabs(os.path.expanduser(d)):
            continue
        p = str(spec.abspath(d))
        if not _under(p, root) and not (repo and _under(p, repo)) and p not in out:
            out.append(p)
    return out


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + os.sep)


_project_roots: dict[str, str | None] = {}
_moving: dict[tuple[str, ...], list[tuple[str, str]]] = {}  # (root, include dirs) -> moving_anchors


def project_root(root: str) -> str | None:
    """The nearest directory at or above ``root`` holding ``.git`` (memoised per process)."""
    hit = _project_roots.get(root, False)
    if hit is not False:
        return hit
    d, found = root, None
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            found = d
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    _project_roots[root] = found
    return found


def _forget() -> None:
    _project_roots.clear()
    _moving.clear()


process_state.register("anchors.project_roots", _forget)


def root_relative(path: str, raw: str, anchors: list[tuple[str, str]]) -> str:
    """``path`` (a realpath) anchored; a file outside every anchor that the compiler reached
    through the root or a directory moving with it (``raw``, the depfile's path, starts there:
    ``<root>/../../shared/x.h``) is named relative to the root, so it is checked where this
    checkout's compiler reads it."""
    name = anchor_path(path, anchors)
    if name.startswith("${"):
        return name
    for a, prefix in anchors:
        if (a == ROOT or a.startswith(ROOT + "/")) and raw.startswith(prefix + os.sep):
            root = next(q for n, q in anchors if n == ROOT)
            return ROOT + "/" + os.path.relpath(path, root).replace(os.sep, "/")
    return name


def anchors_for(plan: BuildPlan) -> list[tuple[str, str]]:
    return anchors_of(plan.spec)


def anchor_path(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path == prefix or path.startswith(prefix + os.sep):
            return name + path[len(prefix):]
    return path


def resolve_anchor(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path.startswith(name):
            return prefix + path[len(name):]
    return path


_BOUNDARY = set("/:;,= \t")


def anchor_text(text: str, anchors: list[tuple[str, str]]) -> str:
    """Anchor every occurrence of a prefix that ends at a path boundary (not /a in /abc)."""
    for name, prefix in anchors:
        start = 0
        while True:
            i = text.find(prefix, start)
            if i < 0:
                break
            j = i + len(prefix)
            if j == len(text) or text[j] in _BOUNDARY:
                text = text[:i] + name + text[j:]
                start = i + len(name)
            else:
                start = j
    return text
