"""The patch switch: route foreign JIT APIs through kernelcache's drop-ins, for one process.

One registry of drop-ins, one way to ask for them everywhere:

=================  ==========================  ===============================
name               patches                     with
=================  ==========================  ===============================
``tvm_ffi``        ``tvm_ffi.cpp``             ``kernelcache.tvm_ffi``
``torch``          ``torch.utils.cpp_extension`` ``kernelcache.cpp_extension``
``flashinfer``     ``flashinfer.jit.core``     ``kernelcache.flashinfer``
``sglang``         ``sglang...compile.loader`` ``kernelcache.sglang``
=================  ==========================  ===============================

``KERNELCACHE_PATCH=tvm_ffi,torch`` (or ``all``; the old ``KERNELCACHE_PATCH_TVM_FFI=1`` too),
``pytest -p kernelcache --kc-patch=tvm_ffi,torch``, ``python -m kernelcache.patch script.py``
or :func:`arm` / :func:`install` from code. Why an import hook rather than patching at once:
the targets import torch (seconds), so a drop-in is installed right after its target finishes
importing; a process that never imports it pays nothing. The adapters are imported by name, only
then, so a drop-in whose adapter is not installed costs nothing until it is asked for.

Each adapter module offers ``install(settings=None)``, ``uninstall()`` and ``is_installed()``
(built on :class:`kernelcache.dropin.Adapter`). The registry and the parsing of names live in
:mod:`.names`, a leaf that ``settings`` reads too.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any, Iterable

from ..base.patch_names import REGISTRY, parse
from . import _hook

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

__all__ = ["REGISTRY", "names", "available", "arm", "disarm", "install", "uninstall", "arm_from_env"]


class PatchError(ImportError):
    """A drop-in was asked for but its adapter module is not part of this kernelcache."""


def names(value: "str | Iterable[str] | None") -> tuple[str, ...]:
    """``"tvm_ffi,torch"`` / ``"all"`` / names -> registered names (``ValueError`` on a typo)."""
    return parse(value, "patch")


def available(name: str) -> bool:
    """Is the adapter of drop-in ``name`` importable (without importing it)?"""
    try:
        return importlib.util.find_spec(REGISTRY[name][1]) is not None
    except (ImportError, ValueError):
        return False


def _install(name: str, settings: "Settings | None") -> None:
    _adapter(name).install(settings)


def _adapter(name: str) -> Any:
    try:
        return importlib.import_module(REGISTRY[name][1])
    except ModuleNotFoundError as e:
        if e.name != REGISTRY[name][1]:
            raise
        raise PatchError(f"kernelcache: drop-in {name!r} ({REGISTRY[name][1]}) is not part of this "
                         "kernelcache installation") from None


def install(which: "str | Iterable[str]" = "all", settings: "Settings | None" = None) -> tuple[str, ...]:
    """Install drop-ins now (importing their targets). ``settings`` None: each call's environment."""
    chosen = names(which)
    for name in chosen:
        _adapter(name).install(settings)
    return chosen


def uninstall(which: "str | Iterable[str]" = "all") -> None:
    """Disarm and put the original functions back (drop-ins never installed are skipped)."""
    chosen = names(which)
    _hook.disarm(REGISTRY[n][0] for n in chosen)
    for name in chosen:
        mod = sys.modules.get(REGISTRY[name][1])
        if mod is not None and mod.is_installed():
            mod.uninstall()


def arm(which: "str | Iterable[str]" = "all", settings: "Settings | None" = None,
        *, strict: bool = True) -> tuple[str, ...]:
    """Install each drop-in when its target gets imported (at once if it already is).

    ``strict`` False skips drop-ins whose adapter is missing ("all" means "all there are");
    True raises :class:`PatchError` for them, before anything is armed.
    """
    chosen = names(which)
    missing = [n for n in chosen if not available(n)]
    if missing and strict:
        _adapter(missing[0])  # raises PatchError naming it
    for name in chosen:
        if name not in missing:
            _hook.arm(REGISTRY[name][0], functools.partial(_install, name, settings))
    return tuple(n for n in chosen if n not in missing)


def disarm(which: "str | Iterable[str]" = "all") -> None:
    """Remove the import hooks (installed drop-ins stay installed)."""
    _hook.disarm(REGISTRY[n][0] for n in names(which))


def arm_from_env(chosen: tuple[str, ...]) -> tuple[str, ...]:
    """Arm what ``KERNELCACHE_PATCH`` / ``KERNELCACHE_PATCH_TVM_FFI`` asked for
    (``settings.patch_requested()``, read by the caller: this package never imports settings).

    Called by ``import kernelcache`` (which the ``kernelcache-patch.pth`` hook imports); never
    raises, so a bad value or a missing adapter can never break interpreter start-up.
    """
    if not chosen:
        return ()
    try:
        return arm(chosen, strict=False)
    except Exception as e:  # noqa: BLE001 - start-up must survive; say why once
        print(f"kernelcache: KERNELCACHE_PATCH not armed: {e}", file=sys.stderr)
        return ()
