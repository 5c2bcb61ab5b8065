"""explain(spec): what the key is made of and what a load would do — without doing any of it.

The load's own lookup loop (``kernelcache.search``: the same places, the same vetting step)
with a read-only acceptance step: the file checks before dlopen, the sha256 included, instead
of dlopen. Read-only by contract: no dlopen, no quarantine, no stat-cache refresh, no used
stamps, no directories created. Tools are still identified (that is what the key is made of);
their identities come from the on-disk memo when it exists.
"""
from __future__ import annotations

from typing import Any

from . import kinds, level1, search, validate
from .errors import ToolchainError
from .events import Place
from .settings import Settings, resolve
from .spec import KernelSpec
from .storage.entry import Entry
from .storage.local import LocalStore


def explain(spec: KernelSpec, settings: Settings | None = None) -> dict[str, Any]:
    """Status (prebuilt | hit | fetched | miss), the level-1 inputs, and every refusal with its reason."""
    s = resolve(settings)
    look = search.Lookup(spec, s, LocalStore(s))

    def check(entry: Entry) -> tuple[Any, validate.Rejection | None]:  # the read-only acceptance step
        rej = validate.before_dlopen(spec, entry.manifest, entry.so_path, check_sha=True)
        return (None, rej) if rej else (entry, None)

    pre = [{"entry": str(v.entry.path), "usable": v.module is not None, "reason": str(v.rejection or "")}
           for v in search.verdicts(look, Place.PREBUILT, check, read_only=True)]
    out: dict[str, Any] = {"name": spec.name, "key1": None, "inputs": {}, "status": "miss", "entry": None,
                           "reason": "", "refused": [f"prebuilt {p['entry']}: {p['reason']}" for p in pre
                                                     if not p["usable"]], "prebuilt": pre}
    usable = next((p for p in pre if p["usable"]), None)
    if usable and not s.rebuild:
        out.update(status="prebuilt", entry=usable["entry"])
    try:
        plan = kinds.make_plan(spec, s)
        l1 = level1.level1(plan, s, look.sources())
    except ToolchainError as e:
        out["reason"] = f"no toolchain: {e}"
        return _fetched(out, look, check)
    look.set_plan(plan, l1)
    out.update(key1=l1.key, inputs=l1.inputs)
    seen = []
    for v in search.verdicts(look, Place.LOCAL, check, read_only=True):
        if v.module is not None:
            if out["status"] == "miss":
                out.update(status="hit", entry=str(v.entry.path))
            return out
        seen.append(v)
        out["refused"].append(f"{v.entry.path}: {v.rejection}")
    if out["status"] != "miss":
        return out
    out["reason"] = search.local_miss(look, seen).reason
    return _fetched(out, look, check)


def _fetched(out: dict, look: search.Lookup, check: search.Accept) -> dict:
    if out["status"] != "miss":
        return out
    skey = look.skey()
    if skey is None:
        return out
    out["source_key"] = skey
    for v in search.verdicts(look, Place.FETCHED, check, read_only=True):
        if v.module is not None:
            out.update(status="fetched", entry=str(v.entry.path))
            return out
        out["refused"].append(f"fetched {v.entry.path}: {v.rejection}")
    return out
