"""torch's compile and link lines for one ``load``/``load_inline`` call, taken from torch itself.

Why from torch: the lines must be what ``torch.utils.cpp_extension`` would run in this process
(include and library paths, ``-DTORCH_EXTENSION_NAME``, ``-std=``, the CUDA arch flags that
``TORCH_CUDA_ARCH_LIST`` or the visible GPUs select, read at call time), on every torch version
in use. So torch's own ninja writer (``_write_ninja_file_to_build_library``, fed by its
``_prepare_ldflags``) writes a build file into a scratch directory and its flag lines are read
back; nothing of torch's flag logic is re-implemented here.

Importing ``torch.utils.cpp_extension`` costs ~150-300 ms (setuptools), more than a warm load.
The lines are therefore memoised on disk, keyed by everything torch's writer reads: the flag
arguments, CUDA or not, the torch installation (its file, version, git revision and the stat of
its ``version.py``, which every install rewrites) and Python's, and the environment variables it
consults. Not the extension's name or its source files: the writer puts the name in exactly one
flag (``-DTORCH_EXTENSION_NAME=``, swapped on reading) and the sources in build edges, not in
flag lines; so a cold build of a *new* extension does not import ``torch.utils.cpp_extension``
either, once any extension with the same flags was built on this installation. A CUDA build
without ``TORCH_CUDA_ARCH_LIST`` depends on the visible GPUs and is not memoised.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..base.records import FrozenRecord
from ._torch_side import TORCH_ENV
from ._versions import NAME_DEFINE

MEMO_VERSION = 2


class Lines(FrozenRecord):
    """Flag lists as torch writes them (``post`` flags appended to the compile flags)."""

    cflags: list[str]
    cuda_cflags: list[str]
    ldflags: list[str]
    user_includes: list[str]
    system_includes: list[str]

    def as_dict(self) -> dict[str, list[str]]:
        return {f: getattr(self, f) for f in self._FIELDS}


def is_cuda_file(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in (".cu", ".cuh")


def _call(fn, **kwargs):
    """Call a private torch helper with the keyword arguments its version accepts."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def _read_ninja_vars(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(" = ")
        if sep and not line.startswith(" ") and name in ("cflags", "post_cflags", "cuda_cflags",
                                                          "cuda_post_cflags", "ldflags"):
            out[name] = shlex.split(value)
    return out


def from_torch(name: str, sources: list[str], extra_cflags: list[str], extra_cuda_cflags: list[str],
               extra_ldflags: list[str], extra_include_paths: list[str], with_cuda: bool,
               is_standalone: bool) -> Lines:
    """Ask torch's ninja writer for the lines (imports torch.utils.cpp_extension)."""
    import torch.utils.cpp_extension as tce

    ldflags = _call(tce._prepare_ldflags, extra_ldflags=list(extra_ldflags), with_cuda=with_cuda,
                    with_sycl=False, verbose=False, is_standalone=is_standalone)
    with tempfile.TemporaryDirectory(prefix="kc-torch-flags-") as tmp:
        path = os.path.join(tmp, "build.ninja")
        _call(tce._write_ninja_file_to_build_library, path=path, name=name, sources=list(sources),
              extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags), extra_sycl_cflags=[],
              extra_ldflags=ldflags, extra_include_paths=list(extra_include_paths), with_cuda=with_cuda,
              with_sycl=False, is_standalone=is_standalone)
        got = _read_ninja_vars(Path(path).read_text())
    ld = [f for f in got.get("ldflags", []) if f != "-shared"]  # the plan adds -shared per kind
    system = list(tce.include_paths("cuda" if with_cuda else "cpu"))
    return Lines(
        cflags=got.get("cflags", []) + got.get("post_cflags", []),
        cuda_cflags=(got.get("cuda_cflags", []) + got.get("cuda_post_cflags", [])) if with_cuda else [],
        ldflags=ld, user_includes=[os.path.abspath(p.strip()) for p in extra_include_paths],
        system_includes=system,
    )


def search_dirs(flags: list[str], option: str) -> list[str]:
    """The directories ``option`` (``-I`` or ``-isystem``) adds, in order: every directory the
    compiler searches, so absent-header probes cover them and a spec read back from an entry's
    command lines (``kernelcache explain NAME``) names the same ones."""
    out = []
    for i, f in enumerate(flags):
        if f == option and i + 1 < len(flags):
            out.append(flags[i + 1])
        elif option == "-I" and f.startswith("-I") and len(f) > 2:
            out.append(f[2:])
    return out


def _torch_identity() -> list:
    """What identifies the imported torch installation (the memo's part of the key)."""
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None)
    try:
        st = os.stat(os.path.join(os.path.dirname(where), "version.py")) if where else None
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] if st else None
    except OSError:
        stamp = None
    return [where, getattr(torch, "__version__", None), str(getattr(getattr(torch, "version", None), "git_version", "")),
            stamp]


def _memo_key(args: dict) -> str:
    facts = {
        "v": MEMO_VERSION, "args": args, "env": {k: os.environ.get(k) for k in TORCH_ENV},
        "torch": _torch_identity(), "python": [sys.executable, sys.version], "cwd": os.getcwd(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:40]


def _renamed(got: dict, old: str, new: str) -> Lines:
    """Lines written for extension ``old``, for extension ``new`` (the name define swapped)."""
    def swap(flags: list[str]) -> list[str]:
        return [NAME_DEFINE + new if f == NAME_DEFINE + old else f for f in flags]

    return Lines(**{k: swap(v) if k in ("cflags", "cuda_cflags") else v for k, v in got.items()})


def _name_only_in_define(got: Lines, name: str) -> bool:
    """The name appears in the lines only as the name define (else they are memoised per name)."""
    return not any(name in f for v in got.as_dict().values() for f in v if f != NAME_DEFINE + name)


def _read_memo(path: Path, name: str) -> Lines | None:
    try:
        got = json.loads(path.read_text())
        return _renamed(got["lines"], got["name"], name)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write_memo(path: Path, name: str, got: Lines) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"name": name, "lines": got.as_dict()}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache still works, it only asks torch every time


def lines(memo_dir: Path, name: str, sources: list[str], extra_cflags: list[str],
          extra_cuda_cflags: list[str], extra_ldflags: list[str], extra_include_paths: list[str],
          with_cuda: bool, is_standalone: bool) -> Lines:
    """torch's lines for these arguments, from the on-disk memo when lines for the same flag
    arguments (any extension name, any sources) were asked before on this installation. A name
    that also occurs inside another flag (a path, say) is memoised under its own key."""
    key_args: dict[str, Any] = dict(extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                    extra_include_paths=extra_include_paths, with_cuda=with_cuda, is_standalone=is_standalone)
    memo = with_cuda is False or bool(os.environ.get("TORCH_CUDA_ARCH_LIST"))
    base = Path(memo_dir) / "torch_flags"
    shared = base / f"{_memo_key(key_args)}.json"

    def own() -> Path:
        return base / f"{_memo_key({**key_args, 'name': name})}.json"

    if memo:
        got = _read_memo(shared, name) or _read_memo(own(), name)
        if got is not None:
            return got
    got = from_torch(name=name, sources=[os.path.abspath(s) for s in sources], **key_args)
    if memo:
        _write_memo(shared if _name_only_in_define(got, name) else own(), name, got)
    return got


def abi(kind: str) -> dict[str, str]:
    """What the key must cover beyond the headers: torch build, C++ ABI, Python ABI (pybind11)."""
    import importlib.machinery

    import torch

    out = {
        "torch": str(torch.__version__),
        "torch_git": str(getattr(torch.version, "git_version", "")),
        "torch_cuda": str(torch.version.cuda or ""),
        "cxx11_abi": str(int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))),
    }
    for attr in ("_PYBIND11_COMPILER_TYPE", "_PYBIND11_STDLIB", "_PYBIND11_BUILD_ABI"):
        value = getattr(torch._C, attr, None)
        if value is not None:
            out[attr.lstrip("_").lower()] = str(value)
    if kind == "torch_python":
        out["python_abi"] = sys.implementation.cache_tag + importlib.machinery.EXTENSION_SUFFIXES[0]
    return out
