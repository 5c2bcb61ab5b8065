"""Was the plugin asked for, or merely installed (and autoloaded through its entry point)?

Why this matters: an installed pytest plugin is imported by every pytest run in that
environment, including projects that never heard of kernelcache. Unless asked for, the plugin
therefore only registers its options and markers and changes nothing else (no GPU probe, no
warming, no environment export). It is asked for by ``-p kernelcache`` (command line,
``addopts``, ``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS``), ini ``kernelcache_enable = true`` or
``KERNELCACHE_PLUGIN=1``; an xdist worker follows its controller.
"""
from __future__ import annotations

import os
import shlex
import warnings

import pytest

from kernelcache.settings import kc_environ

from .options import PLUGIN_NAME, TRUE_WORDS

# The entry point name; the module path is accepted too (PYTEST_PLUGINS spells modules).
_NAMES = {PLUGIN_NAME, f"{PLUGIN_NAME}.pytest_plugin"}


def _p_args(tokens: list[str]) -> list[str]:
    """The plugin names of ``-p NAME`` / ``-pNAME`` / ``--plugin=NAME`` in an argv."""
    out = []
    for i, t in enumerate(tokens):
        if t == "-p" and i + 1 < len(tokens):
            out.append(tokens[i + 1])
        elif t.startswith("-p") and len(t) > 2 and not t.startswith("--"):
            out.append(t[2:].lstrip("="))
        elif t.startswith("--plugin="):
            out.append(t.split("=", 1)[1])
    return out


def asked_for(config: pytest.Config) -> bool:
    """True when this run asked for the plugin (see the module docstring)."""
    if getattr(config, "workerinput", {}).get(PLUGIN_NAME):
        return True
    ns = getattr(config, "known_args_namespace", None) or config.option
    plugins = list(getattr(config.option, "plugins", None) or []) + list(getattr(ns, "plugins", None) or [])
    if _NAMES & {p.strip() for p in plugins}:
        return True
    tokens = [str(a) for a in (config.invocation_params.args or ())]
    try:
        tokens += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        pass
    if _NAMES & set(_p_args(tokens)):
        return True
    if _NAMES & {p.strip() for p in os.environ.get("PYTEST_PLUGINS", "").split(",")}:
        return True
    with warnings.catch_warnings():  # deprecated names are reported once, when options resolve
        warnings.simplefilter("ignore", DeprecationWarning)
        if (kc_environ().get("KERNELCACHE_PLUGIN") or "").strip().lower() in TRUE_WORDS:
            return True
    try:
        return bool(config.getini("kernelcache_enable"))
    except (ValueError, KeyError):
        return False


def given_kc_flags(config: pytest.Config) -> list[str]:
    """The ``--kc-*`` flags on the command line (an error when the plugin is not active)."""
    return sorted({str(a).split("=", 1)[0] for a in (config.invocation_params.args or ())
                   if str(a).startswith("--kc-")})
