"""load(spec): prebuilt -> local -> fetched -> (lock) -> fleet -> build -> one door -> module.

One flat pipeline over the places an entry can come from (``search``: the lookup loop, one vetting
step, typed verdicts); every candidate, a fleet download and a fresh build included, goes through
one acceptance step (``admit.accept``: validation before dlopen, dlopen, identity and exported
schemas), so a stale ``.so`` is rejected, never called. The fleet stage (``fleet``) gets that step
as a door in a typed request. A rejected entry is quarantined; a freshly built one that is rejected
is rebuilt once, then raised with the precise reason. All inputs arrive as one ``Settings``
(``settings=None`` reads the environment now); nothing here reads or writes ``os.environ``.
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import Any, Iterable

from .. import kinds
from ..base import basis, events
from ..base.errors import (BuildError, CacheMissError, CacheRemovedError, KernelCacheError, SchemaMismatch,
                           ToolchainError)
from ..base.events import Miss, Place, Status
from ..base.result import WarmResult
from ..base.settings import Settings, resolve
from ..base.spec import KernelSpec
from ..entry import manifest as manifest_mod, validate
from ..host import toolchain
from ..key import level1
from ..key.plan import BuildPlan
from ..lockfile import hook as lock_hook
from ..storage.entry import Entry
from ..storage.local import LocalStore
from . import admit, search
from .admit import accept, name_lock


class _Ctx:
    """One load: its lookup (spec, settings, store, keys) and what it was refused on the way.

    A plain class, not a dataclass: internal, and every class the first load imports is paid for
    by each process that loads a kernel (benchmarks/bench_dropin_import.py)."""

    __slots__ = ("look", "spec", "s", "store", "t0", "refused")

    def __init__(self, spec: KernelSpec, s: Settings, store: LocalStore) -> None:
        self.look = search.Lookup(spec, s, store)
        self.spec, self.s, self.store = spec, s, store
        self.t0 = time.monotonic()
        self.refused: list[str] = []

    def result(self, status: Status, entry: Entry, reason: str = "") -> WarmResult:
        return WarmResult(self.spec.name, status, time.monotonic() - self.t0, reason, entry.entry_id,
                          str(entry.path), str(entry.so_path), rested_on=basis.current())

    def accept(self, entry: Entry) -> tuple[Any, validate.Rejection | None]:
        """The one acceptance step (``admit.accept``)."""
        return accept(self.spec, entry, self.store)

    def door(self, entry: Entry) -> Any:
        """The acceptance step as the fleet stage sees it: entry -> module | Rejection."""
        mod, rej = self.accept(entry)
        return mod if mod is not None else rej


def _reject(ctx: _Ctx, entry: Entry, rej: validate.Rejection) -> None:
    events.emit(events.Event.QUARANTINE, name=ctx.spec.name, reason=str(rej), code=rej.code, entry=entry.entry_id)
    ctx.store.quarantine(entry, str(rej))


def _hit(ctx: _Ctx, entry: Entry) -> None:
    entry.touch_used()
    ctx.store.remember_hit(entry)


# -- the lookup loop ---------------------------------------------------------------------------
def _first(ctx: _Ctx, place: Place, seen: list[search.Verdict] | None = None) -> search.Verdict | None:
    """The first entry of ``place`` that passes the one acceptance step; one policy for every refusal:
    a local entry that loads wrong is quarantined (one that does not fit this host or its headers is
    skipped); entries built elsewhere are refused with an event, and a fetched one is quarantined."""
    for v in search.verdicts(ctx.look, place, ctx.accept):
        if v.module is not None:
            return v
        rej = v.rejection
        assert rej is not None
        if seen is not None:
            seen.append(v)
        if place is Place.LOCAL and v.admitted:
            _reject(ctx, v.entry, rej)
            continue
        ctx.refused.append(search.refused_line(v, place))
        if place is not Place.LOCAL:
            events.emit(events.REFUSED[place], name=ctx.spec.name, entry=str(v.entry.path), reason=str(rej))
        if place is Place.FETCHED:
            ctx.store.quarantine(v.entry, str(rej))
    return None


def _taken(ctx: _Ctx, place: Place, v: search.Verdict) -> tuple[Any, WarmResult]:
    """The first usable entry of ``place`` (``search.ORDER``), reported as the load's answer."""
    more: dict[str, Any] = {"fetched": True} if place is Place.FETCHED else {}
    return _found(ctx, v, Status.PREBUILT if place is Place.PREBUILT else Status.HIT,
                  "fetched earlier from the fleet cache" if more else "", **more)


def _found(ctx: _Ctx, v: search.Verdict, status: Status, reason: str = "", **fields: Any) -> tuple[Any, WarmResult]:
    """A found entry: remembered as a hit (prebuilt roots are read-only), reported by event."""
    _hit(ctx, v.entry)
    counts = ctx.look.dep_counts
    if counts is not None and status is Status.HIT:  # how much the dependency check looked at
        fields.update(deps_stat=counts[0], deps_trusted=counts[1])
    events.emit(events.Event.PREBUILT_HIT if status is Status.PREBUILT else events.Event.HIT, name=ctx.spec.name,
                entry=v.entry.entry_id, entry_dir=str(v.entry.path), root=str(ctx.spec.root), kind=ctx.spec.kind,
                **fields)
    return v.module, ctx.result(status, v.entry, reason)


# -- building ------------------------------------------------------------------------------------
def _build(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, reason: str
           ) -> tuple[Any, Entry, validate.Rejection | None]:
    """Build privately, pass the one door in the build dir (rejected: nothing kept), publish
    atomically. Returns (module, entry, None); or, when another process published this entry
    first, its entry through the same door: (module or None, entry, rejection)."""
    spec = ctx.spec
    try:
        bdir = ctx.store.new_tmp_dir(l1.key)
    except OSError as e:
        raise KernelCacheError(
            f"kernel {spec.name!r}: cannot create a build directory in the cache "
            f"{ctx.s.cache_dir}: {e}. Point KERNELCACHE_DIR at a writable directory, or use "
            "a prebuilt artifact root (KERNELCACHE_PREBUILT) with KERNELCACHE_NO_BUILD=1") from e
    events.emit(events.Event.BUILD_START, name=spec.name, reason=reason, n_sources=len(plan.sources), key=l1.key[:16])
    t0 = time.monotonic()
    try:
        from ..build import compile as build  # imported on a miss only: a warm load never pays for it

        out = build.run_build(plan, l1, bdir, ctx.s.max_jobs)
        found, surface = kinds.of(spec.kind).record(spec, bdir / plan.so_name)
        m = manifest_mod.Manifest(name=spec.name, key1=l1.key, entry_id=out.entry_id, identity=out.identity,
                                  so_name=plan.so_name, so_sha256=out.so_sha256, so_size=out.so_size, schemas=found,
                                  inputs=l1.inputs, deps=out.deps, absent=out.absent, skey=ctx.look.skey() or "",
                                  skey_inputs=ctx.look.skey_inputs(), build_seconds=round(out.seconds, 3),
                                  host=manifest_mod.this_host(), created=manifest_mod.utc_now(), reason=reason,
                                  kind=spec.kind, surface=surface)
        manifest_mod.write(bdir, m)
        fresh = Entry(bdir, m)
        mod, rej = ctx.accept(fresh)  # the one door, before anything is published
        if rej is not None:
            if rej.mismatches:
                raise SchemaMismatch(spec.name, rej.mismatches, where="freshly built from the current sources")
            raise BuildError(spec.name, "<post-link check>", str(rej))
    except BaseException as e:
        import shutil

        from ..build.faults import classify, failure_text

        events.emit(events.Event.BUILD_FAILED, name=spec.name, seconds=time.monotonic() - t0,
                    error=failure_text(e)[:500], interrupted=not isinstance(e, Exception))

        better = classify(spec.name, ctx.s.cache_dir, bdir, e)  # the cache removed under it, a write failed
        shutil.rmtree(bdir, ignore_errors=True)
        if better is not None:
            raise better from e
        raise
    events.emit(events.Event.BUILD_DONE, name=spec.name, seconds=out.seconds, entry=out.entry_id, root=str(spec.root),
                kind=spec.kind)
    if not out.publishable:
        events.emit(events.Event.RACE_GUARD, name=spec.name, reason=out.not_publishable_reason)
        return mod, fresh, None
    dest, won = ctx.store.publish(bdir, spec.name, l1.key, out.entry_id)
    if not won:
        events.emit(events.Event.PUBLISH_RACE_LOST, name=spec.name, entry=out.entry_id)
    if won or dest == bdir:  # ours (renamed into place, or kept where a winner is not visible yet)
        basis.renamed(bdir, dest)
        entry = Entry(dest, m)
        return admit.published(fresh, entry, mod), entry, None
    basis.drop_under(bdir)
    winner = Entry(dest, manifest_mod.read(dest) or m)
    mod, rej = ctx.accept(winner)  # the winner's bytes, not ours: through the same door
    return mod, winner, rej


def _build_once_more_if_removed(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, reason: str
                                ) -> tuple[Any, Entry, validate.Rejection | None]:
    """``_build``; when the cache was removed under it (``kernelcache clean`` meanwhile), said in
    one line and built once more in the cache as it is now (a second removal is raised)."""
    try:
        return _build(ctx, plan, l1, reason)
    except CacheRemovedError as e:
        events.emit(events.Event.CACHE_REMOVED, name=ctx.spec.name, path=e.path)
    return _build(ctx, plan, l1, reason)


def _build_and_accept(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, reason: str) -> tuple[Any, Entry]:
    """Build and accept; an entry another process published first that is rejected is
    quarantined and built once more."""
    rej = None
    for _ in range(2):
        mod, entry, rej = _build_once_more_if_removed(ctx, plan, l1, reason)
        if rej is None:
            _hit(ctx, entry)
            return mod, entry
        _reject(ctx, entry, rej)
    raise KernelCacheError(f"kernel {ctx.spec.name!r}: the entry published for this build was rejected: {rej}")


# -- the pipeline --------------------------------------------------------------------------------
def single_flight(key1: str, name: str, s: Settings, ready: Any = None):
    """The cross-process build lock (imported on a miss only: filelock costs ms to import)."""
    from ..build.lock import single_flight as _single_flight

    return _single_flight(key1, name, s, ready)


def _fleet():
    from . import fleet  # imported only when a remote is configured

    return fleet


def _from_fleet(ctx: _Ctx, can_build: bool):
    """Ask the fleet stage (the last place); a fetched module is recorded as a hit here."""
    fleet = _fleet()
    out = fleet.obtain(fleet.FleetRequest(ctx.spec, ctx.s, ctx.look.skey() or "", ctx.look.installation(),
                                          ctx.store, ctx.door, can_build))
    ctx.refused.extend(out.misses)
    if out.module is not None:
        _hit(ctx, out.entry)
    return out


def _pipeline(spec: KernelSpec, s: Settings) -> tuple[Any, WarmResult]:
    ctx = _Ctx(spec, s, LocalStore(s))
    for place in () if s.rebuild else search.BEFORE_PLAN:
        got = _first(ctx, place)
        if got is not None:
            return _taken(ctx, place, got)
    try:
        plan = kinds.make_plan(spec, s)
        if toolchain.computing_ahead():  # a fresh cache: a build is likely, and importing its
            from ..build import lock  # noqa: F401 - lock (filelock: ~8 ms) overlaps the hashing
        l1 = level1.level1(plan, s, ctx.look.sources())
    except ToolchainError as e:
        return _without_toolchain(ctx, e)
    ctx.look.set_plan(plan, l1)
    with name_lock(spec.name):
        if s.rebuild:
            miss = search.LocalMiss(Miss.REBUILD, "rebuild requested")
        else:
            seen: list[search.Verdict] = []
            for place in search.AFTER_PLAN:
                got = _first(ctx, place, seen if place is search.KEYED else None)
                if got is not None:
                    return _taken(ctx, place, got)
            miss = search.local_miss(ctx.look, seen)
        events.emit(events.Event.MISS, name=spec.name, reason=miss.reason, reason_code=miss.code.value)
        if s.no_build and not s.remote_enabled:
            raise CacheMissError(spec.name, miss.reason, ctx.refused)
        # A waiter stops waiting as soon as the builder publishes and loads without the lock:
        # loads of a finished build need no lock (publish is atomic), and taking it one waiter at
        # a time would queue N processes' loads behind each other. Once only: an entry that
        # appeared but is refused here sends this load to the lock like any other miss.
        ready = None if s.rebuild else ctx.store.published_since(spec.name, l1.key)
        for waiting_for in (ready, None):
            with single_flight(l1.key, spec.name, s, ready=waiting_for) as held:
                if held is None:  # published while we waited
                    got = _first(ctx, Place.LOCAL)
                    if got is not None:
                        return _found(ctx, got, Status.HIT, "built by another process", after_wait=True)
                    continue
                return _under_lock(ctx, plan, l1, miss)
        raise AssertionError("unreachable: the second round always holds the lock")


def _under_lock(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, miss: search.LocalMiss) -> tuple[Any, WarmResult]:
    """Holding the build lock: look again (another process may have published), then the fleet,
    then build, upload and release the fleet lease."""
    spec, s = ctx.spec, ctx.s
    if not s.rebuild:  # double-checked: another process may have published meanwhile
        got = _first(ctx, Place.LOCAL)
        if got is not None:
            return _found(ctx, got, Status.HIT, "built by another process", after_wait=True)
    lease = None
    if s.remote_enabled and not s.rebuild and ctx.look.skey():
        out = _from_fleet(ctx, can_build=not s.no_build)
        if out.module is not None:
            return out.module, ctx.result(Status.REMOTE, out.entry, f"fetched from {out.remote}")
        lease = out.lease
    if s.no_build:
        raise CacheMissError(spec.name, miss.reason, ctx.refused)
    from ..base.interrupt import sigterm_cleanup

    try:  # holding the fleet lease: SIGTERM releases it like Ctrl-C does (interrupt.sigterm_cleanup)
        with sigterm_cleanup() if lease is not None else nullcontext(), \
                _fleet().lease_kept(lease, s.remote.lease_ttl, spec.name) if lease is not None else nullcontext():
            mod, entry = _build_and_accept(ctx, plan, l1, miss.reason)
            _rested_on_built(ctx, entry)
            if s.remote_writable:  # still renewing: a slow upload must not let the lease lapse
                _fleet().upload(s, entry)
    finally:
        if lease is not None:
            lease.release()
    return mod, ctx.result(Status.BUILT, entry, miss.reason)


def _rested_on_built(ctx: _Ctx, entry: Entry) -> None:
    """What a built answer rests on, noted when the load gathers it (``base.basis``): the check a
    hit runs, and (strict dirs) the cache dir as this build left it."""
    if basis.current() is not None:
        rej = search.vet(ctx.look, entry, Place.LOCAL)
        if rej is not None:
            basis.spoil(f"the entry just built no longer holds: {rej}")
        if ctx.s.strict_dirs:
            ctx.store.check_dirs(settled=True)


def _without_toolchain(ctx: _Ctx, err: ToolchainError) -> tuple[Any, WarmResult]:
    """No compiler here (a serving pod): fetched fleet entries and the fleet, else a clear error."""
    spec, s = ctx.spec, ctx.s
    skey = ctx.look.skey()
    if skey and not s.rebuild:
        with name_lock(spec.name):
            for place in search.NO_TOOLCHAIN:
                got = _first(ctx, place)
                if got is not None:
                    return _taken(ctx, place, got)
            if s.remote_enabled:
                with single_flight("skey:" + skey, spec.name, s):
                    out = _from_fleet(ctx, can_build=False)
                    if out.module is not None:
                        return out.module, ctx.result(Status.REMOTE, out.entry, f"fetched from {out.remote}")
    if s.no_build:
        raise CacheMissError(spec.name, f"no usable prebuilt or fleet artifact and no toolchain: {err}",
                             ctx.refused) from err
    if ctx.refused:  # what was found and why it is not this build (a prebuilt root built with other flags)
        raise ToolchainError(f"{err}\n" + "\n".join(f"  refused: {r}" for r in ctx.refused)) from err
    raise err


# -- public API ----------------------------------------------------------------------------------
def load_with_result(spec: KernelSpec, settings: Settings | None = None, *,
                     recall: str | None = None, recall_note: str | None = None) -> tuple[Any, WarmResult]:
    """Like load(), also returning what happened (hit/built/prebuilt/remote, seconds, reason).

    ``recall``: a drop-in call's digest (``kernelcache.lookup.recall.digest``); the answer is recorded
    under it so that the same call in a later process is recalled without the loader;
    ``recall_note``: a string recorded with it and handed back to the recalling drop-in."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"kernelcache.load expects a KernelSpec, got {type(spec).__name__}")
    s = resolve(settings)
    with events.logging_to(s.log), basis.gathering() if recall is not None else nullcontext():
        mod, res = lock_hook.run(spec, s, _pipeline) if lock_hook.active(s) else _pipeline(spec, s)
    if recall is not None:
        from . import recall_write  # a full load only: never on a recalled one

        recall_write.remember(recall, spec, s, res, recall_note)
    return mod, res


def load(spec: KernelSpec, settings: Settings | None = None) -> Any:
    """Build (if needed), validate and load a kernel module; the same object on repeat calls."""
    return load_with_result(spec, settings)[0]


def _warm_one(spec: KernelSpec, s: Settings) -> WarmResult:
    t0 = time.monotonic()
    try:
        return load_with_result(spec, s)[1]
    except Exception as e:  # noqa: BLE001 - reported per spec, never aborts the others
        return WarmResult(spec.name, Status.FAILED, time.monotonic() - t0, f"{type(e).__name__}: {e}", error=e)


def warm(specs: Iterable[KernelSpec], jobs: int | None = None, settings: Settings | None = None) -> list[WarmResult]:
    """Build/load several specs in parallel; one result per spec, failures included."""
    specs = list(specs)
    if not specs:
        return []
    s = resolve(settings)
    LocalStore(s).sweep_tmp()
    n = jobs or min(len(specs), max(1, (os.cpu_count() or 2) // 2))
    if n <= 1:
        return [_warm_one(sp, s) for sp in specs]
    from concurrent.futures import ThreadPoolExecutor  # imports logging: only when warming several

    from ..base import interrupt

    # Ctrl-C (or SIGTERM) reaches the main thread only: it stops the workers too (their lease waits
    # and builds raise Interrupted, queued specs never start); re-raised once every worker has ended.
    with interrupt.sigterm_cleanup(), ThreadPoolExecutor(max_workers=n) as ex:
        futures = [ex.submit(_warm_one, sp, s) for sp in specs]
        try:
            return [f.result() for f in futures]
        except BaseException:
            interrupt.request_stop()
            ex.shutdown(wait=True, cancel_futures=True)
            interrupt.clear()
            raise
