"""``MODULE:FUNCTION[(LITERAL ARGS)]``: how a deployment names a foreign JIT's module generator.

FlashInfer modules are made by generator functions (``gen_act_and_mul_module("silu")``), SGLang's
by factories that call ``load_jit``; neither has spec objects a command line could name. Both
routes' exports (``kernelcache build --flashinfer`` / ``--sglang``) and the plugin's
``--kc-kernels`` take such a string. Arguments are read with ``ast.literal_eval``, never run as
code; the module is imported as ``python -m`` would find it (the working directory is tried when
it is not importable as is: a console script's ``sys.path`` does not start there).
"""
from __future__ import annotations

import ast
import importlib
import os
import sys
from typing import Any, Callable


def _literal(node: ast.AST, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{text!r}: arguments must be literals (strings, numbers, lists...)") from None


def _import(mod_name: str) -> Any:
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name not in (mod_name, mod_name.split(".")[0]) or here in sys.path:
            raise
        sys.path.insert(0, here)
        return importlib.import_module(mod_name)


def resolve(text: str) -> tuple[Callable[..., Any], list[Any], dict[str, Any]]:
    """The function ``text`` names, with its literal arguments (ValueError naming what is wrong)."""
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
        if any(k.arg is None for k in node.keywords):
            raise ValueError(f"{text!r}: **kwargs are not supported")
        args = [_literal(a, text) for a in node.args]
        kwargs = {str(k.arg): _literal(k.value, text) for k in node.keywords}
        node = node.func
    if not isinstance(node, ast.Name):
        raise ValueError(f"{text!r}: expected a function name after ':'")
    fn = getattr(_import(mod_name), node.id, None)
    if not callable(fn):
        raise ValueError(f"{text!r}: {mod_name} has no function {node.id!r}")
    return fn, args, kwargs
