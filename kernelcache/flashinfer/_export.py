"""The FlashInfer modules a deployment names, built (or hit) through the route, for export.

A deployment names its modules as ``MODULE:FUNCTION`` or ``MODULE:FUNCTION(ARGS)`` with literal
arguments, e.g. ``flashinfer.jit.activation:gen_act_and_mul_module("silu")``: the function is
called and must return a ``JitSpecNvcc`` or a list of them (FlashInfer's ``gen_*_module``
functions, or a deployment's own function listing a model config's modules). Arguments are read
with ``ast.literal_eval``, never evaluated as code. ``kernelcache build --flashinfer SPEC`` then
copies the entries into an artifact root (``kernelcache.export.roots``), labelled with this
FlashInfer's version, which a serving host checks before use (``kinds/flashinfer.py``).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base.events import Status
from ..dropin import named_call
from . import _gate, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


def resolve(text: str) -> list[Any]:
    """The ``JitSpecNvcc`` list a ``MODULE:FUNCTION[(ARGS)]`` string names."""
    fn, args, kwargs = named_call.resolve(text)
    got = fn(*args, **kwargs)
    from flashinfer.jit.core import JitSpecNvcc

    specs = list(got) if isinstance(got, (list, tuple)) else [got]
    bad = [type(s).__name__ for s in specs if not isinstance(s, JitSpecNvcc)]
    if bad or not specs:
        raise ValueError(f"{text!r}: returned {', '.join(bad) or 'nothing'}, expected JitSpecNvcc(s)")
    return specs


def version() -> str:
    """The installed FlashInfer's version (the label an exported entry carries)."""
    return _gate.flashinfer_version()


def built(texts: list[str], s: "Settings") -> list[dict]:
    """Each named module through the route (a hit or one build); a row per module: ``name``,
    ``status``, ``entry_path`` (when it loaded), ``reason`` (when it did not), ``seconds``."""
    rows: list[dict] = []
    seen: set[str] = set()
    for text in texts:
        try:
            specs = resolve(text)
        except Exception as e:  # noqa: BLE001 - reported per name
            rows.append({"name": text, "status": Status.FAILED, "reason": f"{type(e).__name__}: {e}"[:300]})
            continue
        for js in specs:
            if js.name in seen:
                continue
            seen.add(js.name)
            why = _gate.refusal(js)
            if why:
                rows.append({"name": js.name, "status": Status.FAILED, "reason": f"the route does not take it: {why}"})
                continue
            t0 = time.monotonic()
            try:
                result = _route.entry(js, s)[1]
            except Exception as e:  # noqa: BLE001 - reported per module
                rows.append({"name": js.name, "status": Status.FAILED, "reason": str(e)[:300],
                             "seconds": time.monotonic() - t0})
                continue
            rows.append({"name": js.name, "status": result.status, "entry_path": str(result.entry_path),
                         "seconds": time.monotonic() - t0})
    return rows
