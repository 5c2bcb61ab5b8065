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
from typing import Any

import pytest

from kernelcache.base.settings import kc_environ

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


# -- installed but not enabled, while the session uses the plugin --------------------------------
HINT = "add `-p kernelcache` (or ini kernelcache_enable = true)"
_MARKERS = ("gpu", "kernel")
_HINT_KEY = pytest.StashKey[str]()


def _hint(what: str) -> str:
    return f"kernelcache: {what}, but the kernelcache plugin is not enabled: {HINT}"


class NotEnabledHints:
    """Registered only when the plugin is installed but not asked for. It changes no outcome: it
    says "add `-p kernelcache`" where a user of the plugin's fixtures, ini keys or markers looks
    (a config warning, the failing test's report, one summary line). A project's own fixture of
    the same name wins over these stand-ins (conftest fixtures override plugin ones)."""

    def __init__(self, config: pytest.Config):
        self.marked: list[str] = []
        keys = [k for k in _plugin_ini_keys(config) if _ini_set(config, k)]
        if keys:
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(_hint(f"ini {', '.join(keys)} {'is' if len(keys) == 1 else 'are'} set")),
                stacklevel=2)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            names = [m for m in _MARKERS if item.get_closest_marker(m) is not None]
            if names:
                item.stash[_HINT_KEY] = "/".join(names)
                self.marked.append(item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        rep = yield
        marker = item.stash.get(_HINT_KEY, None)
        if marker and rep.failed:
            rep.sections.append(("kernelcache", _hint(f"this test is marked {marker} (GPU gating and "
                                                      "kernel warming come from the plugin)")))
        return rep

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.marked:
            terminalreporter.write_line(_hint(f"{len(self.marked)} test(s) marked gpu/kernel ran ungated"),
                                        yellow=True)

    @pytest.fixture
    def kc_kernel(self) -> None:
        """Stand-in: says how to enable the plugin that provides ``kc_kernel``."""
        pytest.fail(_hint("this test uses the kc_kernel fixture"), pytrace=False)

    @pytest.fixture
    def kernelcache_module(self) -> None:
        """Stand-in: says how to enable the plugin that provides ``kernelcache_module``."""
        pytest.fail(_hint("this test uses the kernelcache_module fixture"), pytrace=False)


def _plugin_ini_keys(config: pytest.Config) -> list[str]:
    from .options import OPTIONS

    keys = [k for o in OPTIONS for k in (o.ini, o.old_ini) if k]
    return [*keys, "kernelcache_test_roots"]


def _ini_set(config: pytest.Config, key: str) -> bool:
    """Set to something other than its registered default (False / [] / ""). Through
    ``getini`` alone: ``config.inicfg`` is deprecated (pytest 9.2 warns, and ``-W error`` turns
    that into an INTERNALERROR in every project of the environment)."""
    try:
        return bool(config.getini(key))
    except (ValueError, KeyError):
        return False
