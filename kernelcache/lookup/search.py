"""The lookup loop: the places an entry can come from, one acceptance step, typed outcomes.

Places, in order (:data:`ORDER`, of :class:`~kernelcache.base.events.Place`): prebuilt artifact roots, the local cache
(entries under the level-1 key), fleet entries fetched earlier, and the fleet itself (the stage
beside the loader, ``kernelcache.lookup.fleet``, which hands each download to the same door). Every
candidate is judged the same way:

* :func:`vet` answers "is this entry good for this spec, here?" with everything checkable
  before any of its code runs: for a local entry, its recorded dependencies and the CPU it was
  built for; for an entry built elsewhere, this installation's sources, headers, ABI, arch and
  CUDA runtime, and the whole build: its recorded source key must be this spec's, computed here
  by :meth:`Lookup.source` (``validate.installation_refusal``, ``validate.build_refusal``);
* then the caller's acceptance step: ``admit.accept`` for a load (file checks, dlopen, identity,
  schemas), a read-only file check for ``diagnose.explain``.

What happens to a refused entry (quarantine, events, the refusal list) is the caller's policy;
this module only produces :class:`Verdict` records, so a load and ``explain`` walk one loop.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from ..base import basis
from ..base.errors import ToolchainError
from ..base.events import Miss, Place, RejectCode
from ..base.layout import BUILT
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry import manifest as manifest_mod, validate
from ..entry.manifest import Manifest
from ..host import anchors, gpu, toolchain
from ..key import deps as key, level1
from ..key.level1 import Level1, diff_inputs
from ..key.plan import BuildPlan
from ..storage import prebuilt
from ..storage.entry import Entry
from ..storage.local import LocalStore

# entry -> (module, None) or (None, why not): admit.accept, or a read-only check
Accept = Callable[[Entry], "tuple[Any, validate.Rejection | None]"]

ORDER: tuple[Place, ...] = (Place.PREBUILT, Place.LOCAL, Place.FETCHED)
"""The places a load tries, in this order, written once: the loader, its no-toolchain path and
``explain`` read it (the fleet stage comes after the last)."""
KEYED = Place.LOCAL  # the place found by the level-1 key: tried only once the plan is made
BEFORE_PLAN = ORDER[:ORDER.index(KEYED)]  # tried before the plan: a hit there hashes nothing
AFTER_PLAN = ORDER[ORDER.index(KEYED):]
NO_TOOLCHAIN = tuple(p for p in AFTER_PLAN if p is not KEYED)  # no compiler, so no level-1 key


class Lookup:
    """One spec on this host: settings, store, and the keys and facts a lookup needs, each
    computed once and only when a place asks for it (a plain class: on every load's path)."""

    __slots__ = ("spec", "s", "store", "plan", "l1", "_source", "_inst", "_anchors", "_sources", "dep_counts")

    def __init__(self, spec: KernelSpec, s: Settings, store: LocalStore) -> None:
        self.spec, self.s, self.store = spec, s, store
        self.plan: BuildPlan | None = None
        self.l1: Level1 | None = None
        self._source: dict[tuple, tuple[str, dict] | None] = {}  # (archs, CPU) -> (source key, its inputs)
        self._inst: validate.Installation | None = None
        self._anchors: list[tuple[str, str]] | None = None
        self._sources: dict[str, str] | None = None
        self.dep_counts: tuple[int, int] | None = None  # (files stat-ed, files trusted) of the last vet

    def sources(self) -> dict[str, str]:
        """sha256 of every source, read once per load (the keys and the installation check share it)."""
        if self._sources is None:
            self._sources = level1.source_hashes(self.spec)
        return self._sources

    def set_plan(self, plan: BuildPlan, l1: Level1) -> None:
        self.plan, self.l1 = plan, l1

    def skey(self) -> str | None:
        """The toolchain-free source key, or None when the target arch is unknown."""
        got = self.source()
        return got[0] if got is not None else None

    def skey_inputs(self) -> dict | None:
        """What :meth:`skey` hashes, in clear (recorded in a built entry's manifest)."""
        got = self.source()
        return got[1] if got is not None else None

    def source(self, archs: tuple[str, ...] | None = None, native_cpu: list[str] | None = None
               ) -> tuple[str, dict] | None:
        """(source key, its inputs) of this spec, computed without any tool (``kinds.source_inputs``);
        None when the target arch is unknown. ``archs``/``native_cpu``: the arch list and CPU
        features of an entry built elsewhere instead of this host's (``validate.build_refusal``
        asks once it checked this host is compatible with them)."""
        memo = (archs, None if native_cpu is None else tuple(native_cpu))
        if memo not in self._source:
            from .. import kinds

            try:
                if archs is None:
                    archs = gpu.target_archs(self.s.cuda_arch) if self.spec.is_cuda else ()
                tvm = toolchain.tvm_ffi_paths(self.s.memo_dir).version
            except ToolchainError:
                return None
            inputs = kinds.source_inputs(self.spec, archs, tvm, self.s, self.sources(), native_cpu)
            self._source[memo] = (level1.canonical_hash(inputs), inputs)
        return self._source[memo]

    def installation(self) -> validate.Installation:
        """This host's facts an entry built elsewhere is checked against (its source key included)."""
        if self._inst is None:
            self._inst = validate.Installation(toolchain.tvm_ffi_paths(self.s.memo_dir).version,
                                               anchors.anchors_of(self.spec), self.s.cuda_arch, self.sources(),
                                               self.source)
        return self._inst

    def candidates(self, place: Place) -> Iterator[Entry]:
        """The entries of one place on disk, in the order they are tried."""
        if place is Place.PREBUILT:
            return prebuilt.looked_at(self.spec.name, self.s)  # refusals too: a miss says why
        if place is Place.LOCAL:
            assert self.l1 is not None, "the local place needs the level-1 key (set_plan)"
            return self.store.candidates(self.spec.name, self.l1.key)
        skey = self.skey()  # Place.FETCHED
        return self.store.fetched(self.spec.name, skey) if skey else iter(())


class Verdict:
    """One candidate judged: a module (accepted), or the rejection and where it came from."""

    __slots__ = ("entry", "module", "rejection", "admitted")

    def __init__(self, entry: Entry, module: Any, rejection: validate.Rejection | None, admitted: bool) -> None:
        self.entry, self.module, self.rejection = entry, module, rejection
        self.admitted = admitted  # False: refused by vet, before the acceptance step ran


def vet(look: Lookup, entry: Entry, place: Place, read_only: bool = False) -> validate.Rejection | None:
    """Is this entry good for this spec, here? Everything checkable before its code may run.

    Local entries: the recorded dependencies still hold (bytes decide; re-validated stats are
    remembered unless ``read_only``), and this CPU has the features it was built for (a shared
    cache: such an entry is skipped, not damaged). Entries built elsewhere: this installation
    (``strict_external`` for fleet entries, which keep their external dependencies).
    """
    if place is Place.LOCAL:
        assert look.plan is not None
        if look._anchors is None:
            look._anchors = anchors.anchors_for(look.plan)
        rec = entry.record  # packed: no JSON parse of thousands of headers on the hit path
        if rec is not None:  # explain (read-only) checks installed packages' headers too
            check = rec.check(look._anchors, strict=look.s.verify_installed or read_only)
        else:  # a manifest that cannot be packed: the JSON check (it notes nothing: never recalled)
            basis.spoil(f"{entry.path}: no packed hit record")
            m = entry.manifest
            check = key.check_deps(m.deps, m.absent, look._anchors, entry.stat_cache())
        look.dep_counts = (check.n_stat, check.n_trusted)
        if not check.ok:
            return validate.Rejection(RejectCode.DEPS, check.reason)
        cpu = validate.cpu_refusal(entry.head)
        if cpu is not None:
            return cpu
        if not read_only:
            if check.retrust:  # a reinstalled package, its headers verified: trust it anew
                entry.rederive_record(check.refreshed)
            elif check.refreshed:
                entry.save_stat_cache(check.refreshed)
        return None
    look.dep_counts = None
    untrusted = prebuilt.refusal(entry) if place is Place.PREBUILT else None
    if untrusted is not None:  # a link out of its root, an unsafe root, a bad signature: read no further
        return validate.Rejection(RejectCode.TRUST, untrusted)
    return vet_manifest(look.spec, entry.manifest, look.installation(), place)


def vet_manifest(spec: KernelSpec, m: Manifest, inst: validate.Installation, place: Place) -> validate.Rejection | None:
    """``vet`` of an entry built elsewhere, on its manifest alone: the fleet stage asks it before
    any download (a fleet entry keeps its external dependencies: ``strict_external``)."""
    from .. import kinds

    return validate.installation_refusal(spec, m, inst, strict_external=place is not Place.PREBUILT,
                                         checks=kinds.of(spec.kind).checks)


def verdicts(look: Lookup, place: Place, accept: Accept, read_only: bool = False) -> Iterator[Verdict]:
    """Every candidate of ``place``, vetted then (if it passed) accepted; a generator, so a
    caller that stops at the first module parses one manifest, not all of them."""
    for entry in look.candidates(place):
        rej = vet(look, entry, place, read_only)
        if rej is not None:
            yield Verdict(entry, None, rej, False)
            continue
        mod, rej = accept(entry)
        yield Verdict(entry, mod, rej, True)


def refused_line(v: Verdict, place: Place) -> str:
    """How a refused candidate is listed (a load's refusals, ``explain``'s): a local entry by
    its path, one built elsewhere with its place first."""
    return f"{v.entry.path}: {v.rejection}" if place is Place.LOCAL else f"{place} {v.entry.path}: {v.rejection}"


class LocalMiss:
    """Why the local cache had nothing usable. The reason of an empty key (a diff against the
    nearest entry of the kernel) reads a manifest: computed once, and only when asked."""

    __slots__ = ("code", "_reason", "_look")

    def __init__(self, code: Miss, reason: str | None = None, look: Lookup | None = None) -> None:
        self.code, self._reason, self._look = code, reason, look

    @property
    def reason(self) -> str:
        if self._reason is None:
            look = self._look
            assert look is not None and look.l1 is not None
            self._reason = nearest_diff(look.store, look.spec.name, look.l1)
        return self._reason


def local_miss(look: Lookup, seen: list[Verdict]) -> LocalMiss:
    """The miss of the local place from its verdicts: a rejected entry, else a changed
    dependency (or CPU), else no entry under this key."""
    rejected = next((v.rejection for v in seen if v.admitted), None)
    if rejected is not None:
        return LocalMiss(Miss.REJECTED, f"cached entry rejected: {rejected}")
    refused = next((v.rejection for v in seen if not v.admitted), None)
    if refused is not None:
        return LocalMiss(Miss.DEPENDENCY_CHANGED, str(refused))
    return LocalMiss(Miss.NO_ENTRY, look=look)


def nearest_diff(store: LocalStore, name: str, l1: Level1) -> str:
    """Why there is no entry: diff vs the most recently used manifest of the same kernel."""
    infos = [i for i in store.infos(name) if i.area == BUILT]
    if not infos:
        return "no cached entry for this kernel"
    latest = manifest_mod.read(max(infos, key=lambda i: i.last_used).path)
    diffs = diff_inputs(latest.inputs if latest else {}, l1.inputs)
    return "; ".join(diffs) if diffs else "no entry for this build key"
