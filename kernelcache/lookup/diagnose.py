"""explain(spec): what the key is made of and what a load would do — without doing any of it.

The load's own lookup loop (``kernelcache.lookup.search``: the same places, the same vetting step)
with a read-only acceptance step: the file checks before dlopen, the sha256 included, instead
of dlopen. Read-only by contract: no dlopen, no quarantine, no stat-cache refresh, no used
stamps, no directories created. Tools are still identified (that is what the key is made of);
their identities come from the on-disk memo when it exists.
"""
from __future__ import annotations

from typing import Any, Callable

from .. import kinds
from ..base.errors import SpecError, ToolchainError
from ..base.events import Explained, Place
from ..base.settings import Settings, resolve
from ..base.spec import KernelSpec
from ..entry import validate
from ..key import level1
from ..storage.entry import Entry
from ..storage.local import LocalStore
from . import search


def explain(spec: KernelSpec, settings: Settings | None = None) -> dict[str, Any]:
    """Status (prebuilt | hit | fetched | remote | miss), the level-1 inputs, every refusal with its reason.

    The places are walked in the load's order (prebuilt, local, fetched, the fleet: read only), and the status is the
    one of the entry a load would use; ``reason`` (why it would miss) is set only for a miss. On a
    host without a compiler the level-1 key cannot be computed: ``note`` says so, and the fetched
    entries are still looked up by the source key, as the load does."""
    s = resolve(settings)
    look = search.Lookup(spec, s, LocalStore(s))

    def check(entry: Entry) -> tuple[Any, validate.Rejection | None]:  # the read-only acceptance step
        rej = validate.before_dlopen(spec, entry.manifest, entry.so_path, check_sha=True,
                                     checks=kinds.of(spec.kind).checks)
        return (None, rej) if rej else (entry, None)

    early = [(place, v) for place in search.BEFORE_PLAN for v in search.verdicts(look, place, check, read_only=True)]
    pre = [{"entry": str(v.entry.path), "usable": v.module is not None, "reason": str(v.rejection or "")}
           for _, v in early]
    out: dict[str, Any] = {"name": spec.name, "key1": None, "inputs": {}, "status": Explained.MISS, "entry": None,
                           "reason": "", "note": "", "refused": [search.refused_line(v, place) for place, v in early
                                                                 if v.module is None], "prebuilt": pre,
                           "root": str(spec.root), "kind": spec.kind,
                           "flags": {"cflags": list(spec.cflags), "cuda_cflags": list(spec.cuda_cflags),
                                     "ldflags": list(spec.ldflags)}}
    usable = next((p for p in pre if p["usable"]), None)
    if usable and not s.rebuild:
        out.update(status=Explained.PREBUILT, entry=usable["entry"])
    try:
        plan = kinds.make_plan(spec, s)
        l1 = level1.level1(plan, s, look.sources())
    except ToolchainError as e:
        out["note"] = f"no toolchain here, so no level-1 key (a load looks up fetched entries by source key): {e}"
        why = f"no usable prebuilt or fetched entry, and no toolchain: {e}"
        return _places(out, look, check, search.NO_TOOLCHAIN, [], lambda: why)
    look.set_plan(plan, l1)
    out.update(key1=l1.key, inputs=l1.inputs)
    seen: list[search.Verdict] = []
    return _places(out, look, check, search.AFTER_PLAN, seen, lambda: search.local_miss(look, seen).reason)


_STATUS = {Place.PREBUILT: Explained.PREBUILT, Place.LOCAL: Explained.HIT, Place.FETCHED: Explained.FETCHED}


def _places(out: dict, look: search.Lookup, check: search.Accept, places: tuple[Place, ...],
            seen: list[search.Verdict], why: Callable[[], str]) -> dict:
    """The load's places after the prebuilt roots (``search.ORDER``), read only, then the fleet.
    Past the keyed place, a status already set (a usable prebuilt entry) ends the walk; ``why``:
    the miss reason, kept only if nothing usable is found anywhere."""
    for place in places:
        if place is not search.KEYED and out["status"] != Explained.MISS:
            return out
        if place is Place.FETCHED and look.skey() is not None:
            out["source_key"] = look.skey()
        for v in search.verdicts(look, place, check, read_only=True):
            if v.module is not None:
                if out["status"] == Explained.MISS:
                    out.update(status=_STATUS[place], entry=str(v.entry.path))
                return out
            if place is search.KEYED:
                seen.append(v)
            out["refused"].append(search.refused_line(v, place))
    if out["status"] != Explained.MISS:
        return out
    skey = look.skey()
    if look.s.remote_enabled and skey is not None and not look.s.rebuild and _fleet(out, look, skey):
        return out
    out["reason"] = why()
    return out


def _fleet(out: dict, look: search.Lookup, skey: str) -> bool:
    """The load's last place, read only: the fleet's entries under the source key, vetted on
    their manifests as the fleet stage vets them before a download (nothing is downloaded)."""
    from ..base.errors import KernelCacheError
    from ..entry.manifest import Manifest
    from ..storage.remote.url import redact
    from . import fleet

    url = redact(look.s.remote.url or "")
    try:
        rc = fleet.client(look.s)
        refs = rc.list_entries(look.spec.name, skey)
        for ref in refs[:fleet.MAX_CANDIDATES]:
            m = Manifest.from_dict(rc.read_entry(ref).manifest)
            if m is None or m.name != look.spec.name or m.skey != skey:
                out["refused"].append(f"fleet {url} {ref.entry_id}: manifest does not describe this entry")
                continue
            rej = search.vet_manifest(look.spec, m, look.installation(), Place.FETCHED)
            if rej is not None:
                out["refused"].append(f"fleet {url} {ref.entry_id}: {rej}")
                continue
            out.update(status=Explained.REMOTE, entry=f"{url} {ref.entry_id}")
            return True
        if not refs:
            out["note"] = _also(out["note"], f"the fleet cache {url} has no entry under source key {skey[:16]}")
    except KernelCacheError as e:  # unreachable, refused, misconfigured: what a load would meet too
        out["note"] = _also(out["note"], f"the fleet cache {url} could not be asked: {e}")
    return False


def _also(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


def explain_recorded(name: str, settings: Settings | None = None) -> dict[str, Any]:
    """``explain NAME`` for a kernel whose spec is not known on this host: entries fetched from
    the fleet (a torch extension, a FlashInfer module) record their sources' bytes, not where
    they are. The entry a load would take first (a usable prebuilt one, else the one loaded
    last) is reported from its manifest, its binary checked; the sources cannot be (``note``)."""
    from ..base.layout import BUILT
    from ..entry import manifest as manifest_mod
    from ..storage import prebuilt

    s = resolve(settings)
    out: dict[str, Any] = {"name": name, "key1": None, "inputs": {}, "status": Explained.MISS, "entry": None, "reason": "",
                           "note": "", "refused": [], "prebuilt": []}
    found: list[tuple[Explained, Entry]] = [(Explained.PREBUILT, e) for e in prebuilt.candidates(name, s)]
    for info in sorted(LocalStore(s).infos(name), key=lambda i: -i.last_used):
        m = manifest_mod.read(info.path)
        if m is not None:
            found.append((Explained.HIT if info.area == BUILT else Explained.FETCHED, Entry(info.path, m)))
    for status, entry in found:
        m = entry.manifest
        try:
            checks = kinds.of(m.kind).checks
        except SpecError as e:  # a kind this process does not know: a miss that says so
            problem: str | None = str(e)
        else:
            problem = validate.binary_problem(entry.so_path, list(m.schemas), m.so_size, m.so_sha256, checks)
        if status is Explained.PREBUILT:
            out["prebuilt"].append({"entry": str(entry.path), "usable": problem is None, "reason": problem or ""})
        if problem is not None:
            out["refused"].append(f"{status} {entry.path}: {problem}")
            continue
        out.update(status=status, entry=str(entry.path), key1=m.key1 if status is Explained.HIT else None,
                   inputs=dict(m.inputs or {}), kind=m.kind,
                   note="its sources are not checked: this host's entries of it record their bytes, not where "
                        "they are (explain --spec MODULE:FUNC checks them)")
        return out
    out["reason"] = "no entry of this kernel in the cache or a prebuilt root"
    return out
