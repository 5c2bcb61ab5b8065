"""The FlashInfer modules a deployment names, built (or hit) through the route, for export.

A deployment names its modules as ``MODULE:FUNCTION`` or ``MODULE:FUNCTION(ARGS)`` with literal
arguments, e.g. ``flashinfer.jit.activation:gen_act_and_mul_module("silu")``: the function is
called and must return a ``JitSpecNvcc`` or a list of them (FlashInfer's ``gen_*_module``
functions, or a deployment's own function listing a model config's modules). Arguments are read
with ``ast.literal_eval``, never evaluated as code. ``kernelcache build --flashinfer SPEC`` then
copies the entries into an artifact root (``kernelcache.export``), labelled with this
FlashInfer's version, which a serving host checks before use (``kinds/flashinfer.py``).
"""
from __future__ import annotations

import ast
import importlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from . import _gate, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings


def _literal(node: ast.AST, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{text!r}: arguments must be literals (strings, numbers, lists...)") from None


def _import(mod_name: str) -> Any:
    """``mod_name``, found as ``python -m`` would: the working directory is tried when it is not
    importable as is (``kernelcache build --flashinfer app.kernels:gen`` at a project's root; the
    console script's ``sys.path`` starts at its own directory), as ``--spec`` does."""
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name not in (mod_name, mod_name.split(".")[0]) or here in sys.path:
            raise
        sys.path.insert(0, here)
        return importlib.import_module(mod_name)


def resolve(text: str) -> list[Any]:
    """The ``JitSpecNvcc`` list a ``MODULE:FUNCTION[(ARGS)]`` string names."""
    mod_name, sep, call = text.partition(":")
    if not sep or not mod_name or not call:
        raise ValueError(f"{text!r}: expected MODULE:FUNCTION or MODULE:FUNCTION(ARGS)")
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"{text!r}: {e.msg}") from None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if isinstance(node, ast.Call):
        args = [_literal(a, text) for a in node.args]
        kwargs = {k.arg: _literal(k.value, text) for k in node.keywords if k.arg}
        if len(kwargs) != len(node.keywords):
            raise ValueError(f"{text!r}: **kwargs are not supported")
        node = node.func
    if not isinstance(node, ast.Name):
        raise ValueError(f"{text!r}: expected a function name after ':'")
    fn = getattr(_import(mod_name), node.id, None)
    if not callable(fn):
        raise ValueError(f"{text!r}: {mod_name} has no function {node.id!r}")
    got = fn(*args, **kwargs)
    from flashinfer.jit.core import JitSpecNvcc

    specs = list(got) if isinstance(got, (list, tuple)) else [got]
    bad = [type(s).__name__ for s in specs if not isinstance(s, JitSpecNvcc)]
    if bad or not specs:
        raise ValueError(f"{text!r}: returned {', '.join(bad) or 'nothing'}, expected JitSpecNvcc(s)")
    return specs


def version() -> str:
    """The installed FlashInfer's version (the label an exported entry carries)."""
    return _gate.flashinfer_version()


def built(texts: list[str], s: "Settings") -> list[dict]:
    """Each named module through the route (a hit or one build); a row per module: ``name``,
    ``status``, ``entry_path`` (when it loaded), ``reason`` (when it did not), ``seconds``."""
    rows: list[dict] = []
    seen: set[str] = set()
    for text in texts:
        try:
            specs = resolve(text)
        except Exception as e:  # noqa: BLE001 - reported per name
            rows.append({"name": text, "status": "failed", "reason": f"{type(e).__name__}: {e}"[:300]})
            continue
        for js in specs:
            if js.name in seen:
                continue
            seen.add(js.name)
            why = _gate.refusal(js)
            if why:
                rows.append({"name": js.name, "status": "failed", "reason": f"the route does not take it: {why}"})
                continue
            t0 = time.monotonic()
            try:
                result = _route.entry(js, s)[1]
            except Exception as e:  # noqa: BLE001 - reported per module
                rows.append({"name": js.name, "status": "failed", "reason": str(e)[:300],
                             "seconds": time.monotonic() - t0})
                continue
            rows.append({"name": js.name, "status": result.status, "entry_path": str(result.entry_path),
                         "seconds": time.monotonic() - t0})
    return rows
