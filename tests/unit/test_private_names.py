"""No module of kernelcache uses a private name (``_x``) of another module.

A private name is a module's own business; a second module reaching for it (``from .m import
_x``, ``import kernelcache.m as m; m._x``, ``from . import m; m._x``) couples the two behind the
contracts' back, and is how a "small" refactor breaks a far-away caller. Checked by AST over
every file under ``kernelcache/``. A private *submodule* (``tvm_ffi/_api.py``) is private to
its package: siblings may import it, other packages may not.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kernelcache"

# Known violations awaiting a fix (each entry: "file: what it uses"); empty since issue 18 landed.
PENDING: set[str] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_pkg: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def _package_of(module: str) -> str:
    return module.rsplit(".", 1)[0] if "." in module else module


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (PKG.parent / rel).with_suffix(".py").is_file() or (PKG.parent / rel / "__init__.py").is_file()


def violations_in(path: Path) -> list[str]:
    """What ``path`` uses of other modules' private names, as ``file:line: text`` strings."""
    current = _module_name(path)
    is_pkg = path.name == "__init__.py"
    own_pkg = current if is_pkg else _package_of(current)
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(PKG.parent)
    out: list[str] = []
    aliases: dict[str, str] = {}  # local name -> kernelcache module it is bound to

    def private_module_outside(target: str) -> bool:
        leaf = target.rsplit(".", 1)[-1]
        return _private(leaf) and not own_pkg.startswith(_package_of(target))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(current, is_pkg, node.module, node.level)
            if not src.startswith("kernelcache"):
                continue
            if src != current and private_module_outside(src):
                out.append(f"{rel}:{node.lineno}: imports private module {src}")
            for a in node.names:
                target = f"{src}.{a.name}"
                if _is_module(target):
                    aliases[a.asname or a.name] = target
                    if private_module_outside(target):
                        out.append(f"{rel}:{node.lineno}: imports private module {target}")
                elif _private(a.name) and src != current:
                    out.append(f"{rel}:{node.lineno}: from {src} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("kernelcache"):
                    if a.asname:
                        aliases[a.asname] = a.name
                    if private_module_outside(a.name):
                        out.append(f"{rel}:{node.lineno}: imports private module {a.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != current):
            target = f"{aliases[node.value.id]}.{node.attr}"
            if _is_module(target) and not private_module_outside(target):
                continue  # a sibling's private submodule
            out.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return sorted(set(out))


def all_violations() -> list[str]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        found += violations_in(path)
    return found


def _file(violation: str) -> str:
    return violation.split(":", 1)[0]


def test_no_module_uses_a_private_name_of_another():
    found = [v for v in all_violations() if _file(v) not in PENDING]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_pending_list_only_names_files_that_still_violate():
    still = {_file(v) for v in all_violations()}
    stale = sorted(PENDING - still)
    assert not stale, f"remove from PENDING (fixed): {stale}"


@pytest.mark.parametrize("code,expected", [
    ("from .events import _lock\n", ["from kernelcache.events import _lock"]),
    ("from kernelcache.host.toolchain import _memo_lock\n", ["from kernelcache.host.toolchain import _memo_lock"]),
    ("from . import events\nevents._counters.clear()\n", ["events._counters (kernelcache.events)"]),
    ("import kernelcache.host.gpu as g\ng._memo.clear()\n", ["g._memo (kernelcache.host.gpu)"]),
    ("from .tvm_ffi import _api\n", ["imports private module kernelcache.tvm_ffi._api"]),
    ("from . import events\nevents.emit('x')\n", []),
    ("from .errors import __doc__\n", []),
])
def test_the_checker_catches_each_form(tmp_path, monkeypatch, code, expected):
    """The checker itself: a module placed in a throwaway copy of the package layout."""
    fake = tmp_path / "kernelcache"
    (fake / "tvm_ffi").mkdir(parents=True)
    for name in ("__init__.py", "events.py", "toolchain.py", "gpu.py", "errors.py", "tvm_ffi/__init__.py",
                 "tvm_ffi/_api.py"):
        (fake / name).write_text("")
    mod = fake / "probe.py"
    mod.write_text(code)
    monkeypatch.setattr(__import__(__name__, fromlist=["PKG"]), "PKG", fake)
    got = [v.split(": ", 1)[1] for v in violations_in(mod)]
    assert got == expected
