"""The raw ``KERNELCACHE_*`` facts the cheapest paths need, read without ``kernelcache.base.settings``.

Why a second reader beside ``settings.py``: ``import kernelcache`` and a recalled warm load
(``kernelcache.lookup.recall``) run in every process before any setting is needed, and importing the
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


def log_target(env: Mapping[str, str] | None = None) -> str | None:
    """``KERNELCACHE_LOG`` as given (``Settings.log``): where a recalled hit is logged too."""
    return (os.environ if env is None else env).get("KERNELCACHE_LOG")


# KERNELCACHE_* variables that cannot change which entry answers a call (a recalled call's digest,
# kernelcache.lookup.recall, leaves them out, so a differently observed run shares the memo): where events
# and reports go; the pytest plugin's own selection; where and how long a build waits for its lock
# (a recalled call never builds); the fleet's knobs (a recorded answer is a local entry, which a load
# takes before the fleet is asked); the cache dir (the memo lives in it: a key already).
NOT_AN_ANSWER = frozenset({
    "KERNELCACHE_LOG", "KERNELCACHE_VERBOSE", "KERNELCACHE_REPORT_JSON", "KERNELCACHE_IMPACT_MAP",
    "KERNELCACHE_PLUGIN", "KERNELCACHE_WARM", "KERNELCACHE_PREBUILD", "KERNELCACHE_KERNELS", "KERNELCACHE_SPECS",
    "KERNELCACHE_BUILD_ONLY", "KERNELCACHE_AFFECTED_SINCE", "KERNELCACHE_JOBS",
    "KERNELCACHE_LOCK_DIR", "KERNELCACHE_LOCK_TIMEOUT", "KERNELCACHE_DIR",
    "KERNELCACHE_REMOTE", "KERNELCACHE_REMOTE_MODE", "KERNELCACHE_REMOTE_SIGNING_KEY",
    "KERNELCACHE_REMOTE_VERIFY_KEYS", "KERNELCACHE_REMOTE_TIMEOUT", "KERNELCACHE_REMOTE_LEASE_TTL",
    "KERNELCACHE_REMOTE_WAIT",
})
# Spellings that mean what unset means (what ``Settings.to_env`` writes for a default: a pytest run
# exports them for its test processes); on/off variables: every false spelling. An empty value means
# unset for every variable. tests/loader/test_recall_env.py checks both against ``Settings``.
_FALSE = ("0", "false", "no", "off")
SAME_AS_UNSET = {
    **{k: _FALSE for k in ("KERNELCACHE_NO_BUILD", "KERNELCACHE_REBUILD", "KERNELCACHE_PATCH_TVM_FFI",
                           "KERNELCACHE_VERIFY_INSTALLED", "KERNELCACHE_STRICT_DIRS", "KERNELCACHE_NO_RECALL")},
    "KERNELCACHE_LOCK_MODE": ("error",),
}


def kc_items(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The ``KERNELCACHE_*`` variables that may change an answer, sorted (a fingerprint, not an
    interpretation): none of :data:`NOT_AN_ANSWER`, and none whose value means unset (empty, or in
    :data:`SAME_AS_UNSET`), so the variables a pytest run exports for its test processes and a plain
    ``python -c`` without them fingerprint alike."""
    env = os.environ if env is None else env
    out = []
    for k in env:
        if not k.startswith(PREFIX) or k in NOT_AN_ANSWER:
            continue
        v = env[k]
        if not v.strip() or v.strip().lower() in SAME_AS_UNSET.get(k, ()):
            continue
        out.append((k, v))
    return sorted(out)
