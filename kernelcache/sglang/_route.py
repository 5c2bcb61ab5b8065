"""What ``load_jit`` does once routed: the module is a kernelcache entry, loaded or built once.

Each call is resolved the way SGLang resolves it (``_request``), its command lines are read from
the build file SGLang generates (``_lines``), and the module is loaded through
``kernelcache.load_with_result`` (local entry, prebuilt roots, fleet, else one build under the
key's lock, validated before it is published and at every load). SGLang's knobs keep their
meaning: ``SGLANG_JIT_FORCE_RECOMPILE`` rebuilds once (kernelcache's ``rebuild``) and
``SGLANG_CRASH_ON_JIT_COMPILE`` means "no build": a miss raises a ``RuntimeError`` (as SGLang's
does, also a kernelcache ``CacheMissError``) naming where the route looked. A call the route
does not take (``_gate``, or a build file whose rules it does not reproduce) runs SGLang's own
``load_jit``, with one line saying why. ``SGLANG_JIT_CACHE_DIR`` is neither read nor written by
a routed call.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..base.errors import CacheMissError
from . import _gate

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

LOADER = "sglang.kernels.jit.utils.compile.loader"
# SGLang's own cache's knobs: a routed call never reads them, so they are no part of its recall digest
_OWN_CACHE_KNOBS = frozenset({"SGLANG_JIT_CACHE_DIR", "SGLANG_JIT_CACHE_KEEP", "SGLANG_JIT_CACHE_DEBUG"})
_loaded: dict[str, Path] = {}  # SGLang module name -> the entry .so this process loaded for it
_results: dict[str, tuple[str, str]] = {}  # module name -> (entry dir, status) of its last full load


def loaded_path(module_name: str) -> Path | None:
    """The entry file a routed ``load_jit`` loaded for ``module_name`` in this process."""
    return _loaded.get(module_name)


def results() -> dict[str, tuple[str, str]]:
    """SGLang module name -> (entry dir, load status) of each full-path load in this process."""
    return dict(_results)


def _reset() -> None:
    _loaded.clear()
    _results.clear()


class SglangCacheMiss(CacheMissError, RuntimeError):
    """A miss under ``SGLANG_CRASH_ON_JIT_COMPILE``: the ``RuntimeError`` SGLang raises there, and
    kernelcache's ``CacheMissError``."""

    def __init__(self, module_name: str, cause: BaseException) -> None:
        message = (f"JIT module '{module_name}' has no usable cached build (kernelcache: local, prebuilt or "
                   f"fleet), and SGLANG_CRASH_ON_JIT_COMPILE forbids compiling at runtime: {cause}")
        RuntimeError.__init__(self, message)
        self.spec_name = module_name
        self.reason = message
        self.candidates: list[str] = []


def settings_for(settings: "Settings | None") -> "Settings":
    """The settings of one routed call: the installed ones (or the environment's), with SGLang's
    knobs applied."""
    from ..dropin.call_settings import resolve

    s = resolve(settings)
    knobs = _gate.envs()
    if knobs.SGLANG_JIT_FORCE_RECOMPILE.get():
        s = s.replace(rebuild=True)
    if knobs.SGLANG_CRASH_ON_JIT_COMPILE.get():
        s = s.replace(no_build=True)
    return s


def _digest(request: Any) -> str | None:
    """The recall digest of a resolved call (``kernelcache.lookup.recall``): the build file SGLang
    generated (compilers, every flag, include and library path), each translation unit (a
    generated wrapper's text, an on-disk source's path and where it leads now) and every
    ``SGLANG_*`` variable but SGLang's own cache's knobs; the files the answer rested on are
    witnessed by stat when it is recorded. None under ``SGLANG_JIT_FORCE_RECOMPILE`` (every call rebuilds)."""
    from ..lookup import recall

    if _gate.envs().SGLANG_JIT_FORCE_RECOMPILE.get():
        return None
    units = [(u.filename, bool(u.is_cuda), u.source) for u in request.spec.translation_units()]
    on_disk = [u[0] for u in units if u[2] is None]
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("SGLANG_") and k not in _OWN_CACHE_KNOBS)
    call = (request.module_name, request.build_file, units, recall.real_paths(on_disk), env)
    return recall.digest("sglang", call)


def resolved(request: Any, settings: "Settings | None") -> tuple[Any, Any, Any] | str:
    """``(KernelSpec, settings, created snapshot)`` of one resolved call, or why the route leaves
    it to SGLang (a string)."""
    from . import _lines, _spec

    try:
        lines = _lines.parse(request.build_file)
    except _lines.Unmirrored as e:
        return f"its build file has what the route does not reproduce: {e}"
    cuda = any(u.is_cuda for u in request.spec.translation_units())
    why = _gate.compiler_refusal(lines.cxx, lines.nvcc if cuda else None)
    if why:
        return why
    from sglang.kernels.jit.utils.compile.paths import KERNEL_PATH

    return _spec.kernel_spec(request, lines, Path(KERNEL_PATH), settings_for(settings))


def _own(args: tuple, kwargs: dict, original: Callable[..., Any], why: str) -> Any:
    """SGLang's own ``load_jit`` for a call not taken (said once, with why)."""
    _gate.say("_".join(str(a) for a in args) or "load_jit", why)
    return original(*args, **kwargs)


def load(args: tuple, kwargs: dict, original: Callable[..., Any], settings: "Settings | None") -> Any:
    """One routed ``load_jit`` call: the loaded module (SGLang's own call where not taken)."""
    from . import _request

    loader = sys.modules[LOADER]
    why = _gate.call_refusal(loader)
    if why:
        return _own(args, kwargs, original, why)
    request = _request.resolve(loader, args, kwargs)
    d = None
    if settings is None:  # install(settings) given: the full path with those
        from ..lookup import recall

        d = _digest(request)
        got = recall.recall_entry(d) if d is not None else None
        if got is not None:
            _loaded[request.module_name] = Path(got[1])
            return got[0]
    full = resolved(request, settings)
    if isinstance(full, str):
        return _own(args, kwargs, original, full)
    import kernelcache

    from ..dropin import generated

    spec, s, created = full
    try:
        module, result = kernelcache.load_with_result(spec, settings=s, recall=d)
    except CacheMissError as e:
        if created is not None:
            generated.discard(created)
        if s.no_build and _gate.envs().SGLANG_CRASH_ON_JIT_COMPILE.get():
            raise SglangCacheMiss(request.module_name, e) from e
        raise
    except BaseException:
        if created is not None:
            generated.discard(created)
        raise
    so = Path(result.so_path) if result.so_path else Path(result.entry_path) / f"{spec.name}.so"
    _loaded[request.module_name] = so
    _results[request.module_name] = (str(result.entry_path), str(result.status))
    return module


def make(original: Callable[[], Any], installed: Callable[[], bool], settings: Any) -> Callable[..., Any]:
    """The replacement of ``load_jit`` (``original()``: SGLang's own). A module that bound ours
    while the route was installed calls SGLang's own once the route is uninstalled."""
    from ..dropin.adapter import routed

    def load_jit(*args: str, **kwargs: Any) -> Any:
        own = original()
        if not installed():
            return own(*args, **kwargs)
        return load(args, kwargs, own, settings)

    try:  # as SGLang's own: a first load reached from a compiled region stays out of the graph
        import torch

        load_jit = torch.compiler.disable(load_jit)
    except (ImportError, AttributeError):  # pragma: no cover - sglang always has torch
        pass
    return routed(load_jit, None)


from ..base import process_state  # noqa: E402 - registered once the reset exists

process_state.register("sglang.loaded", _reset)
