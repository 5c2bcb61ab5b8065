"""The SGLang JIT modules a deployment names, built (or hit) through the route, for export.

SGLang has no spec objects to name: a module exists as the ``load_jit`` call inside a kernel
module's factory (``get_ngram_corpus_cls``, a ``cache_once`` function taking template args). So a
deployment names factories, ``MODULE:FUNCTION`` or ``MODULE:FUNCTION(ARGS)`` with literal
arguments, e.g. ``sglang.kernels.ops.speculative.ngram_corpus:get_ngram_corpus_cls``; each is
called with the route installed on the export's settings, and every module its ``load_jit``
calls loaded is one row. Arguments are read with ``ast.literal_eval``, never evaluated as code.
``kernelcache build --sglang SPEC`` then copies the entries into an artifact root
(``kernelcache.export.roots``), labelled with this SGLang's version (``kinds/sglang.py``).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from ..base.events import Status
from ..dropin import named_call
from . import _gate, _patch, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


def factory(text: str) -> tuple[Callable[..., Any], list[Any], dict[str, Any]]:
    """The function a ``MODULE:FUNCTION[(ARGS)]`` string names, with its literal arguments."""
    return named_call.resolve(text)


def built(texts: list[str], s: "Settings") -> list[dict]:
    """Each named factory called through the route on ``s``; a row per module its ``load_jit``
    loaded: ``name``, ``status``, ``entry_path``, ``seconds`` (or ``reason`` for a failed name)."""
    why = _gate.version_refusal()
    if why:
        return [{"name": t, "status": Status.FAILED, "reason": f"the route does not take it: {why}"} for t in texts]
    was, prior = _patch.is_installed(), _patch.ADAPTER.settings
    rows: list[dict] = []
    seen: set[str] = set()
    try:
        for text in texts:
            t0 = time.monotonic()
            try:
                fn, args, kwargs = factory(text)
                _patch.install(s)  # after the import: every holder of load_jit gets the route
                before = _route.results()
                fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - reported per name
                rows.append({"name": text, "status": Status.FAILED, "reason": f"{type(e).__name__}: {e}"[:300],
                             "seconds": time.monotonic() - t0})
                continue
            new = {k: v for k, v in _route.results().items() if before.get(k) != v and k not in seen}
            if not new:
                rows.append({"name": text, "status": Status.FAILED, "seconds": time.monotonic() - t0,
                             "reason": "no load_jit call reached the route (already loaded in this process?)"})
            for name, (entry_path, status) in sorted(new.items()):
                seen.add(name)
                rows.append({"name": name, "status": status, "entry_path": entry_path,
                             "seconds": time.monotonic() - t0})
    finally:
        if was:
            _patch.install(prior)
        else:
            _patch.uninstall()
    return rows
