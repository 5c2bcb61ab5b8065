"""Anchors: machine-specific path prefixes written as ``${ROOT}``, ``${TVM_FFI}``, ``${SITE}``,
``${CUDA}`` (the CUDA toolkit's real path), ``${PYINC}`` (the Python headers' directory) and
``${KERNELCACHE}`` (this package: the schema-export header it pre-includes).

Keys and recorded dependencies name files relative to these anchors, so a checkout, a venv or a
toolkit that sits elsewhere (another host of the fleet, a CI runner) computes the same keys and
finds its entries; the files themselves are still checked by their bytes where this host has
them (a toolkit with other headers misses).

Files outside the kernel's root that move with it are named relative to the root too
(``${ROOT}/../common/x.h``): everything in the repository holding the root (the nearest
directory above it with ``.git``), and the spec's relative include dirs that leave the root.
Why: such a file is reached through the root (``-I../common``, ``#include "../common/x.h"``), so
in a moved checkout the compiler reads the new checkout's copy; an absolute record would keep
checking the old checkout's copy (a stale hit while the old one is still on disk).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..base import process_state
from ..base.errors import ToolchainError
from ..base.spec import KernelSpec
from . import toolchain

if TYPE_CHECKING:
    from ..key.plan import BuildPlan

ROOT = "${ROOT}"  # the spec's root: sources and headers under it are keyed relative to it
TVM_FFI = "${TVM_FFI}"
SITE = "${SITE}"  # site-packages: header-only dependencies (FlashInfer) relocate with the venv
CUDA = "${CUDA}"  # the toolkit: /usr/local/cuda-13.0 here, /opt/cuda there, same bytes, one key
PYINC = "${PYINC}"  # sysconfig's "include" (FlashInfer and torch put it on every command line)
KERNELCACHE = "${KERNELCACHE}"  # this package's directory (plan.SCHEMA_EXPORT_HEADER lives there)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # kernelcache/, above host/
# A "toolkit" that is a system prefix (Debian's nvcc in /usr) is left unanchored: anchoring /usr
# would name the system's own headers and compilers after the toolkit.
_SYSTEM_PREFIXES = frozenset({"/", "/usr", "/usr/local", "/opt"})


# -- anchors ---------------------------------------------------------------------------------
def anchors_of(spec: KernelSpec) -> list[tuple[str, str]]:
    """(anchor, realpath prefix), longest prefix first.

    ``${SITE}`` is the site-packages directory holding tvm-ffi (where header-only packages
    such as FlashInfer live too); taken from tvm-ffi's path because asking sysconfig costs
    milliseconds per process.
    """
    pairs = [(ROOT, str(spec.root)), *machine_anchors(), *moving_anchors(spec)]
    return sorted(pairs, key=lambda p: -len(p[1]))


def machine_anchors() -> list[tuple[str, str]]:
    """This host's install locations: tvm-ffi, site-packages, the CUDA toolkit, Python's headers,
    kernelcache itself.

    A location may have two spellings (``CUDA_HOME=/usr/local/cuda``, a symlink, and its real
    path): both are anchored, so command lines naming either and depfiles (real paths) agree.
    """
    tvm_dir = toolchain.tvm_ffi_paths().package_dir
    pairs = [(TVM_FFI, tvm_dir), (SITE, os.path.dirname(tvm_dir)), (KERNELCACHE, PACKAGE_DIR)]
    pairs += [(CUDA, d) for d in toolkit_dirs()]
    pairs += [(PYINC, d) for d in python_include_dirs()]
    return pairs


def toolkit_dirs() -> tuple[str, ...]:
    """The CUDA toolkit kernelcache compiles with (``toolchain.find_cuda_home``: its real path,
    and ``CUDA_HOME``'s spelling when that differs); () without one (memoised per environment)."""
    env = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), os.environ.get("PATH"))
    hit = _toolkits.get(env)
    if hit is None:
        try:
            real = toolchain.find_cuda_home()
        except ToolchainError:
            real = ""
        dirs = [] if real in _SYSTEM_PREFIXES or not real else [real]
        for spelled in env[:2]:
            if dirs and spelled and os.path.realpath(spelled) == real:
                spelled = os.path.abspath(spelled).rstrip(os.sep)
                if spelled not in dirs and spelled not in _SYSTEM_PREFIXES:
                    dirs.append(spelled)
        hit = _toolkits[env] = tuple(dirs)
    return hit


def python_include_dirs() -> tuple[str, ...]:
    """Python's include directory as sysconfig names it (``<base prefix>/include/pythonX.Y<abi>``,
    derived: asking sysconfig costs milliseconds a process), and its real path if it differs."""
    global _pyinc
    if _pyinc is None:
        v = sys.version_info
        d = os.path.join(sys.base_prefix, "include", f"python{v[0]}.{v[1]}{getattr(sys, 'abiflags', '')}")
        real = os.path.realpath(d)
        _pyinc = tuple(x for x in dict.fromkeys((d, real)) if x not in _SYSTEM_PREFIXES)
    return _pyinc


def moving_anchors(spec: KernelSpec) -> list[tuple[str, str]]:
    """(``${ROOT}/../..``, realpath) for each of :func:`moving_dirs` (memoised per process)."""
    root = str(spec.root)
    memo = (root, *map(str, spec.include_dirs), "", *map(str, spec.system_include_dirs))
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
_toolkits: dict[tuple[str | None, ...], tuple[str, ...]] = {}  # (CUDA_HOME, CUDA_PATH, PATH) -> dirs
_pyinc: tuple[str, ...] | None = None


def project_root(root: str) -> str | None:
    """The nearest directory at or above ``root`` holding ``.git`` (memoised per process)."""
    if root in _project_roots:
        return _project_roots[root]
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
    global _pyinc
    _project_roots.clear()
    _moving.clear()
    _toolkits.clear()
    _pyinc = None


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
