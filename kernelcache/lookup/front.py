"""``kernelcache.load(spec)``: a spec the cache answered before is recalled here; every other call
(and any ``settings=``) takes the full path in :mod:`kernelcache.lookup.loader`.

Why: the full lookup of a warm load (plan, toolchain facts, level-1 key, hit record, acceptance)
costs ~5 ms and imports the loader's ~30 modules in every fresh process; the drop-ins' fronts
already answer a repeated call from a memo the full path wrote (:mod:`kernelcache.lookup.recall`:
every file the answer rested on, re-stat-ed). The public API gets the same: the spec, as plain
data, plus the real paths it names, is the call. A ``Settings`` object can carry what no digest
of the environment sees, so a call with one always takes the full path (as in the drop-ins).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import recall

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings
    from ..base.spec import KernelSpec


def load(spec: "KernelSpec", settings: "Settings | None" = None) -> Any:
    """Build (if needed), validate and load a kernel module; the same object on repeat calls.

    A call the cache answered before in another process, with nothing it rested on changed, is
    recalled without the loader (counted as a hit); everything else is ``loader.load``.
    """
    d = digest(spec) if settings is None else None
    if d is not None:
        mod = recall.recall(d)
        if mod is not None:
            return mod
    from .loader import load_with_result

    return load_with_result(spec, settings, recall=d)[0]


def digest(spec: Any) -> str | None:
    """The recall digest of ``load(spec)``: every field of the spec as plain data, and where the
    paths it names (sources, include directories) lead now. None: never recalled (not a
    ``KernelSpec``, a field that is not plain data, objects or archives in the link flags)."""
    from ..base.spec import KernelSpec  # the caller built a spec: already imported

    if type(spec) is not KernelSpec or recall.links_objects(spec.ldflags):
        return None  # a subclass may add inputs the full path reads and no digest sees
    fields = tuple((f.name, _plain(getattr(spec, f.name))) for f in dataclasses.fields(spec))
    paths = [str(spec.abspath(p)) for p in (*spec.sources, *spec.include_dirs, *spec.system_include_dirs)]
    return recall.digest("kernelcache.load", (fields, recall.real_paths(paths)))


def _plain(v: Any) -> Any:
    if isinstance(v, (Path, os.PathLike)):
        return os.fspath(v)
    return v
