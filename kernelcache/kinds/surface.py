"""The exported surface of a torch-kind binary: what callers can reach once it is loaded.

Why: the founding bug of this project was a stale pybind11 module whose class lacked an
attribute (``Param.min_match_window_size``). A binary's surface (module functions, classes with
their attributes and methods, other module attributes by type; the ops a library registers)
is computed right after it is built, in a *subprocess* (``kinds.torch_common``), so
a module that fails to import or differs is never imported into the caller. The manifest keeps
it, bound to the binary by its sha256; a loaded module must show the same surface.

torch is imported lazily: this module is part of the core and must stay cheap to import.

The light child (:func:`light_main`): a pybind11 extension needs torch's *libraries* loaded
before it can be imported, not torch's Python package (``import torch`` costs 1-4 s, more than
any other step of a cold build but the compile). So the child of a ``torch_python`` build loads
``libtorch_python.so`` of the parent's torch (its dependencies, libtorch and c10, come with it)
and imports the extension; a module whose import needs torch's Python side imports torch itself
or fails, and a failed light child is followed by the full one (``import torch`` first).
"""
from __future__ import annotations

from typing import Any


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def of_module(mod: Any) -> dict:
    """Functions, classes (sorted attribute names) and other attributes of a Python module."""
    functions: list[str] = []
    classes: dict[str, list[str]] = {}
    attributes: dict[str, str] = {}
    for name in sorted(dir(mod)):
        if _is_dunder(name):
            continue
        obj = getattr(mod, name)
        if isinstance(obj, type):
            classes[name] = sorted(a for a in dir(obj) if not _is_dunder(a))
        elif callable(obj):
            functions.append(name)
        else:
            attributes[name] = type(obj).__name__
    return {"functions": functions, "classes": classes, "attributes": attributes}


def _import(qualname: str, path: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(qualname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {qualname} from {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _from_file(mod: Any, path: str) -> bool:
    import os

    origin = getattr(mod, "__file__", None)  # (importlib overwrites __spec__ on a module it is handed back)
    try:
        return origin is not None and os.path.samefile(origin, path)
    except OSError:
        return False


def import_path(name: str, path: str) -> Any:
    """Import an extension module from a file the way torch's JIT does (not put in sys.modules).

    Never a module made from another file: pybind11 (3.x) remembers every module it created by
    name and returns that one when a *different* binary is imported under the same name later in
    the process. Such a binary is imported under a private dotted name instead (the init symbol
    comes from the last component, so ``PyInit_<name>`` is still the one called), which gives a
    module really made from ``path``.
    """
    mod = _import(name, path)
    if _from_file(mod, path):
        return mod
    import hashlib

    private = f"_kernelcache_{hashlib.sha256(path.encode()).hexdigest()[:16]}.{name}"
    mod = _import(private, path)
    if not _from_file(mod, path):
        raise ImportError(f"importing {path} as {name!r} returned the module of another file "
                          f"({getattr(mod, '__file__', None)})")
    return mod


def light_main(argv: list[str], path: str) -> int:
    """The light surface child: ``LIB NAME`` + the binary's path -> one ``KC_SURFACE`` json line."""
    import ctypes
    import json
    import sys

    lib, name = argv
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)  # what ``import torch`` would have mapped for the extension
    found = of_module(import_path(name, path))
    sys.stdout.write("KC_SURFACE " + json.dumps(found, sort_keys=True) + "\n")
    return 0


def op_names() -> set[str]:
    import torch

    return set(torch._C._dispatch_get_all_op_names())


def difference(expected: dict, found: dict) -> str:
    """A short human description of how two surfaces differ ("" when equal)."""
    if expected == found:
        return ""
    out = []
    for section in sorted(set(expected) | set(found)):
        a, b = expected.get(section), found.get(section)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if k not in b:
                    out.append(f"{section} {k} missing")
                elif k not in a:
                    out.append(f"{section} {k} unexpected")
                elif a[k] != b[k]:
                    if isinstance(a[k], list) and isinstance(b[k], list):
                        gone, new = sorted(set(a[k]) - set(b[k])), sorted(set(b[k]) - set(a[k]))
                        out.append(f"{k}: missing {gone} unexpected {new}")
                    else:
                        out.append(f"{section} {k}: {a[k]} != {b[k]}")
        elif isinstance(a, list) and isinstance(b, list):
            gone, new = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            out.append(f"{section}: missing {gone} unexpected {new}")
        else:
            out.append(f"{section}: {a!r} != {b!r}")
    return "; ".join(out) or "surfaces differ"
