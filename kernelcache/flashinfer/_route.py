"""What ``JitSpecNvcc`` does once routed: FlashInfer's AOT packages first, then kernelcache.

``build_and_load``: the AOT artifacts (FlashInfer's ``try_load``, which only ever returns AOT
modules) go first; then the module is loaded through ``kernelcache.load_with_result`` (local
entry, prebuilt roots, fleet, else one build under the key's lock) and handed to the spec's
``post_load_adapter``. The entry's ``.so`` is remembered per URI so ``get_library_path(s)``,
``jit_library_path`` and ``is_compiled`` name the file actually loaded: the cubin loader
``CDLL``s that path to set its callback in the loaded module.

``FLASHINFER_DISABLE_JIT`` means "no build": local, prebuilt and fleet entries load; a miss
raises FlashInfer's ``MissingJITCacheError`` (also a kernelcache ``CacheMissError``).
A module the route does not take (``_gate``) runs FlashInfer's own code, with one line saying why.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import _gate

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

_lock = threading.Lock()
_loaded: dict[str, Path] = {}  # URI -> the entry .so this process loaded for it


def loaded_path(uri: str) -> Path | None:
    return _loaded.get(uri)


def _reset() -> None:
    with _lock:
        _loaded.clear()


def _miss_error(jit_spec: Any, cause: BaseException) -> BaseException:
    from flashinfer.jit.core import MissingJITCacheError

    from ..errors import CacheMissError

    class FlashInferCacheMiss(MissingJITCacheError, CacheMissError):  # type: ignore[misc]
        def __init__(self, message: str) -> None:
            RuntimeError.__init__(self, message)
            self.spec = jit_spec
            self.spec_name = jit_spec.name
            self.reason = message
            self.candidates: list[str] = []

    why = "FLASHINFER_DISABLE_JIT is set" if os.environ.get("FLASHINFER_DISABLE_JIT") else "no build allowed"
    return FlashInferCacheMiss(
        f"{why} and no cached entry of {jit_spec.name!r} was found (local, prebuilt or fleet): {cause}")


def entry(jit_spec: Any, s: "Settings") -> tuple[Any, Any]:
    """``jit_spec``'s module through kernelcache (no AOT step, no adapter) and what happened.

    The entry's ``.so`` is remembered for the URI, so FlashInfer's library paths name it."""
    import kernelcache

    from ..dropin import generated
    from ..errors import CacheMissError
    from . import _spec

    spec, s, created = _spec.kernel_spec(jit_spec, s)
    try:
        module, result = kernelcache.load_with_result(spec, settings=s)
    except CacheMissError as e:
        if created is not None:
            generated.discard(created)
        raise _miss_error(jit_spec, e) from e
    except BaseException:
        if created is not None:
            generated.discard(created)
        raise
    so = Path(result.so_path) if result.so_path else Path(result.entry_path) / f"{spec.name}.so"
    with _lock:
        _loaded[jit_spec.name] = so
    return module, result


def load(jit_spec: Any, settings: Any) -> Any:
    """Load ``jit_spec``'s module through kernelcache (no AOT step); the adapted module."""
    from ..dropin.call_settings import resolve

    s = resolve(settings)
    if os.environ.get("FLASHINFER_DISABLE_JIT"):
        s = s.replace(no_build=True)
    module = entry(jit_spec, s)[0]
    adapter = jit_spec.post_load_adapter
    return adapter(module) if adapter is not None else module


def make(attr: str, original: Callable[[], Any], settings: Any) -> Any:
    """The replacement of one ``JitSpecNvcc`` attribute (``original()``: FlashInfer's own)."""
    from ..dropin.adapter import RoutedProperty, routed

    def build_and_load(self: Any) -> Any:
        why = _gate.refusal(self)
        if why:
            _gate.say(self.name, why)
            return original()(self)
        cached = self.try_load()  # FlashInfer's AOT packages first
        if cached is not None:
            return cached
        return load(self, settings)

    def _build_and_load_jit_fallback(self: Any) -> Any:
        why = _gate.refusal(self)
        if why:
            _gate.say(self.name, why)
            return original()(self)
        return load(self, settings)

    def get_library_path(self: Any) -> Path:
        path = None if self.is_aot else _loaded.get(self.name)
        return path if path is not None else original()(self)

    def get_library_paths(self: Any) -> tuple[Path, ...]:
        path = None if self.aot_artifacts else _loaded.get(self.name)
        return (path,) if path is not None else original()(self)

    def jit_library_path(self: Any) -> Path:
        path = _loaded.get(self.name)
        return path if path is not None else original().fget(self)

    def is_compiled(self: Any) -> bool:
        return self.name in _loaded or original().fget(self)

    fns = {f.__name__: f for f in (build_and_load, _build_and_load_jit_fallback, get_library_path,
                                    get_library_paths, jit_library_path, is_compiled)}
    fn = fns[attr]
    if attr in ("jit_library_path", "is_compiled"):
        return RoutedProperty(fn)
    return routed(fn, None)


from .. import process_state  # noqa: E402 - registered once the reset exists

process_state.register("flashinfer.loaded", _reset)
