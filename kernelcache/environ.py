"""The raw ``KERNELCACHE_*`` facts the cheapest paths need, read without ``kernelcache.settings``.

Why a second reader beside ``settings.py``: ``import kernelcache`` and a recalled warm load
(``kernelcache.recall``) run in every process before any setting is needed, and importing the
``Settings`` record costs ~400 new objects (enough to set off a pending full garbage collection
right after ``import torch``). This module holds no meaning beyond "which directory", "is a log
or a patch asked for" and "which variables exist"; what they mean is ``settings.py``'s, which
uses the same rules from here.
"""
from __future__ import annotations

import os
from typing import Mapping

PREFIX = "KERNELCACHE_"


def cache_dir(env: Mapping[str, str] | None = None) -> str:
    """The cache root: ``KERNELCACHE_DIR``, else ``$XDG_CACHE_HOME/kernelcache``, else
    ``~/.cache/kernelcache`` (absolute, ``~`` expanded)."""
    env = os.environ if env is None else env
    d = env.get("KERNELCACHE_DIR")
    if not d:
        d = os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "kernelcache")
    return os.path.abspath(os.path.expanduser(d))


def log_requested(env: Mapping[str, str] | None = None) -> bool:
    """Is an event log written somewhere (``KERNELCACHE_LOG`` set, and not ``0``: silent)?"""
    return ((os.environ if env is None else env).get("KERNELCACHE_LOG") or "0") != "0"


def patch_mentioned(env: Mapping[str, str] | None = None) -> bool:
    """Does the environment mention a drop-in patch at all (``settings.patch_requested`` parses it)?"""
    env = os.environ if env is None else env
    return bool(env.get("KERNELCACHE_PATCH") or env.get("KERNELCACHE_PATCH_TVM_FFI"))


def kc_items(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every ``KERNELCACHE_*`` variable, sorted (a fingerprint, not an interpretation)."""
    env = os.environ if env is None else env
    return sorted((k, env[k]) for k in env if k.startswith(PREFIX))
