"""Drop-in for SGLang's own JIT (``load_jit``): its modules built, cached and shared by kernelcache.

No code change: ``KERNELCACHE_PATCH=sglang`` (or ``all``), ``pytest -p kernelcache
--kc-patch=sglang``, ``python -m kernelcache.patch --jit sglang app.py`` (or
``python -m kernelcache.sglang app.py``), or ``kernelcache.sglang.install()``.

What changes for a module SGLang's ``load_jit`` builds (its n-gram corpus, its header-only CUDA
kernels): it becomes a kernelcache entry of kind ``sglang``, compiled with the command lines of
the ``build.ninja`` SGLang generates for it and keyed by them, by the bytes of its sources and
generated wrapper, of every header the compiler read, and by the compilers' identity; it is
validated at every load (exports, identity, the binary's checksum), built once across processes
and hosts, fetched from the fleet by a host without a compiler, exported into prebuilt roots
(``kernelcache build --sglang``) and listed by ``kernelcache ls`` / ``explain``. SGLang's
``SGLANG_JIT_FORCE_RECOMPILE`` and ``SGLANG_CRASH_ON_JIT_COMPILE`` keep their meaning. Untested
SGLang versions and calls with steps the route does not mirror run SGLang's own JIT, with one line
saying why (docs/sglang_dropin.md).

Importing this module patches nothing and imports neither SGLang nor tvm-ffi.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._gate import TESTED_VERSIONS
from ._patch import install, is_installed, uninstall

if TYPE_CHECKING:
    from pathlib import Path

    from ..base.settings import Settings

__all__ = ["install", "uninstall", "is_installed", "TESTED_VERSIONS", "loaded_path", "built"]


def loaded_path(module_name: str) -> "Path | None":
    """The entry file a routed ``load_jit`` loaded for SGLang module ``module_name`` (None: none)."""
    from ._route import loaded_path as _loaded_path

    return _loaded_path(module_name)


def built(texts: list[str], settings: "Settings | None" = None) -> list[dict]:
    """The modules the factories ``texts`` name (``MODULE:FUNCTION[(LITERAL ARGS)]``) load, each a
    hit or one build through the route: a row per module (``name``, ``status``, ``entry_path``) or
    per failed name (``reason``)."""
    from ..base.settings import resolve
    from ._export import built as _built

    return _built(list(texts), resolve(settings))
