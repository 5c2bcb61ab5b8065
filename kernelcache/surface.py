"""The exported surface of a torch-kind binary: what callers can reach once it is loaded.

Why: the founding bug of this project was a stale pybind11 module whose class lacked an
attribute (``Param.min_match_window_size``). A binary's surface (module functions, classes with
their attributes and methods, other module attributes by type; the ops a library registers)
is computed right after it is built, in a *subprocess* (``kinds.torch_common``), so
a module that fails to import or differs is never imported into the caller. The manifest keeps
it, bound to the binary by its sha256; a loaded module must show the same surface.

torch is imported lazily: this module is part of the core and must stay cheap to import.
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


def import_path(name: str, path: str) -> Any:
    """Import an extension module from a file the way torch's JIT does (not put in sys.modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {name} from {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
