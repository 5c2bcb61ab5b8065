"""load(spec): prebuilt -> local -> (lock) -> fleet -> build -> validate -> module.

One flat pipeline; every place an entry can come from hands a local directory to the same
acceptance step (``_accept``: validation before dlopen, dlopen, identity and exported schemas),
so a stale ``.so`` is rejected, never called. The fleet stage (``kernelcache.fleet``) gets that
step as a door in a typed request and answers with a typed outcome. A rejected entry is quarantined; a freshly built
one that is rejected is rebuilt once, then the error is raised with the precise reason.

All inputs arrive as one ``Settings`` (``settings=None`` reads the environment now); nothing
here reads or writes ``os.environ``.
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from . import anchors, events, gpu, key, kinds, level1, toolchain, validate
from .admit import accept, name_lock
from .admit import reset_process_state as reset_process_state  # re-exported (public API)
from . import manifest as manifest_mod
from .errors import CacheMissError, KernelCacheError, SchemaMismatch, ToolchainError
from .manifest import Manifest
from .plan import BuildPlan
from .settings import Settings, resolve
from .spec import KernelSpec
from .storage import prebuilt
from .storage.entry import Entry
from .storage.local import LocalStore


@dataclass
class WarmResult:
    """Outcome of building/loading one spec (what `warm`, the CLI and the plugin report)."""

    name: str
    status: str  # "hit" | "built" | "prebuilt" | "remote" | "failed" | "skipped"
    seconds: float
    reason: str = ""  # miss reason (why it was built / fetched) or failure message
    entry_id: str = ""
    entry_path: str = ""
    so_path: str = ""
    error: BaseException | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3),
                "reason": self.reason, "entry_id": self.entry_id, "entry_path": self.entry_path,
                "so_path": self.so_path}


class _Ctx:
    """One load: the spec, its settings, and what was learned on the way (refusals, keys).

    A plain class, not a dataclass: internal, and every class the first load imports is paid for
    by each process that loads a kernel (benchmarks/bench_dropin_import.py)."""

    __slots__ = ("spec", "s", "store", "t0", "refused", "_skey")

    def __init__(self, spec: KernelSpec, s: Settings, store: LocalStore) -> None:
        self.spec, self.s, self.store = spec, s, store
        self.t0 = time.monotonic()
        self.refused: list[str] = []
        self._skey: str | None = None

    def result(self, status: str, entry: Entry, reason: str = "") -> WarmResult:
        return WarmResult(self.spec.name, status, time.monotonic() - self.t0, reason, entry.entry_id,
                          str(entry.path), str(entry.so_path))

    def skey(self) -> str | None:
        """The toolchain-free source key, or None when the target arch is unknown."""
        if self._skey is None:
            try:
                archs = gpu.target_archs(self.s.cuda_arch) if self.spec.is_cuda else ()
                tvm = toolchain.tvm_ffi_paths(self.s.memo_dir).version
            except ToolchainError:
                return None
            self._skey = kinds.source_key(self.spec, archs, tvm, self.s)
        return self._skey

    def installation(self) -> validate.Installation:
        return validate.Installation(toolchain.tvm_ffi_paths(self.s.memo_dir).version,
                                     anchors.anchors_of(self.spec), self.s.cuda_arch)


def _accept(ctx: "_Ctx", entry: Entry) -> tuple[Any, validate.Rejection | None]:
    return accept(ctx.spec, entry, ctx.store)


def _door(ctx: _Ctx):
    """The acceptance step as the fleet stage sees it: entry -> module | Rejection."""
    def door(entry: Entry) -> Any:
        mod, rej = _accept(ctx, entry)
        return mod if mod is not None else rej

    return door


def _reject(ctx: _Ctx, entry: Entry, rej: validate.Rejection) -> None:
    events.emit("quarantine", name=ctx.spec.name, reason=str(rej), code=rej.code, entry=entry.entry_id)
    ctx.store.quarantine(entry, str(rej))


def _hit(ctx: _Ctx, entry: Entry) -> None:
    entry.touch_used()
    ctx.store.remember_hit(entry)


# -- the places an entry can come from ---------------------------------------------------------
def _foreign(ctx: _Ctx, entries: Iterator[Entry], strict_external: bool) -> tuple[Any, Entry | None]:
    """First entry built elsewhere (prebuilt root, fetched fleet entry) that validates here."""
    inst = None
    for entry in entries:
        inst = inst or ctx.installation()
        rej = validate.installation_refusal(ctx.spec, entry.manifest, inst, prebuilt.cuda_runtime_loadable,
                                            strict_external)
        if rej is None:
            mod, rej = _accept(ctx, entry)
            if mod is not None:
                return mod, entry
        assert rej is not None
        ctx.refused.append(f"{entry.origin} {entry.path}: {rej}")
        events.emit(f"{entry.origin}_refused", name=ctx.spec.name, entry=str(entry.path), reason=str(rej))
        if entry.origin == "fetched":
            ctx.store.quarantine(entry, str(rej))
    return None, None


class _LocalLook:
    __slots__ = ("module", "entry", "reason", "code")

    def __init__(self, module: Any = None, entry: Entry | None = None, reason: str = "", code: str = "") -> None:
        self.module, self.entry, self.reason, self.code = module, entry, reason, code


def _local(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1) -> _LocalLook:
    """Entries under the level-1 key; the first whose recorded headers match and that loads."""
    anchored = anchors.anchors_for(plan)
    dep_reason, rejected = "", None
    for entry in ctx.store.candidates(ctx.spec.name, l1.key):
        m = entry.manifest
        check = key.check_deps(m.deps, m.absent, anchored, entry.stat_cache())
        cpu = validate.cpu_refusal(m)  # a shared cache dir: built on another CPU (kept, not quarantined)
        if not check.ok or cpu is not None:
            why = check.reason if not check.ok else str(cpu)
            dep_reason = dep_reason or why
            ctx.refused.append(f"{entry.path}: {why}")
            continue
        if check.refreshed:
            entry.save_stat_cache(check.refreshed)
        mod, rej = _accept(ctx, entry)
        if mod is not None:
            return _LocalLook(mod, entry)
        _reject(ctx, entry, rej)
        rejected = rejected or rej
    if rejected:
        return _LocalLook(reason=f"cached entry rejected: {rejected}", code="rejected")
    if dep_reason:
        return _LocalLook(reason=dep_reason, code="dependency_changed")
    from .diagnose import nearest_diff

    return _LocalLook(reason=nearest_diff(ctx.store, ctx.spec.name, l1), code="no_entry")


# -- building ------------------------------------------------------------------------------------
def _build(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, reason: str) -> Entry:
    """Build privately, check schemas (SchemaMismatch: nothing kept), publish atomically."""
    spec = ctx.spec
    try:
        bdir = ctx.store.new_tmp_dir(l1.key)
    except OSError as e:
        raise KernelCacheError(
            f"kernel {spec.name!r}: cannot create a build directory in the cache "
            f"{ctx.s.cache_dir}: {e}. Point KERNELCACHE_DIR at a writable directory, or use "
            "a prebuilt artifact root (KERNELCACHE_PREBUILT) with KERNELCACHE_NO_BUILD=1") from e
    events.emit("build_start", name=spec.name, reason=reason, n_sources=len(plan.sources), key=l1.key[:16])
    t0 = time.monotonic()
    try:
        from . import build  # imported on a miss only: a warm load never pays for it

        out = build.run_build(plan, l1, bdir, ctx.s.max_jobs)
        problem = validate.binary_problem(bdir / plan.so_name, list(spec.functions), out.so_size)
        found, surface = kinds.of(spec.kind).fresh_check(spec, bdir / plan.so_name, problem)
    except BaseException as e:
        events.emit("build_failed", name=spec.name, seconds=time.monotonic() - t0, error=str(e)[:500])
        import shutil

        shutil.rmtree(bdir, ignore_errors=True)
        raise
    m = Manifest(name=spec.name, key1=l1.key, entry_id=out.entry_id, identity=out.identity,
                 so_name=plan.so_name, so_sha256=out.so_sha256, so_size=out.so_size, schemas=found,
                 inputs=l1.inputs, deps=out.deps, absent=out.absent, skey=ctx.skey() or "",
                 build_seconds=round(out.seconds, 3), host=manifest_mod.this_host(),
                 created=manifest_mod.utc_now(), reason=reason, kind=spec.kind, surface=surface)
    manifest_mod.write(bdir, m)
    events.emit("build_done", name=spec.name, seconds=out.seconds, entry=out.entry_id)
    if not out.publishable:
        events.emit("race_guard", name=spec.name, reason=out.not_publishable_reason)
        return Entry(bdir, m)
    dest, won = ctx.store.publish(bdir, spec.name, l1.key, out.entry_id)
    if not won:
        events.emit("publish_race_lost", name=spec.name, entry=out.entry_id)
    return Entry(dest, manifest_mod.read(dest) or m)


def _build_and_accept(ctx: _Ctx, plan: BuildPlan, l1: level1.Level1, reason: str) -> tuple[Any, Entry]:
    """Build, accept; a rejected fresh build is quarantined and rebuilt once."""
    rej = None
    for _ in range(2):
        entry = _build(ctx, plan, l1, reason)
        mod, rej = _accept(ctx, entry)
        if mod is not None:
            _hit(ctx, entry)
            return mod, entry
        _reject(ctx, entry, rej)
    assert rej is not None
    if rej.mismatches:
        raise SchemaMismatch(ctx.spec.name, rej.mismatches, where="after rebuild")
    raise KernelCacheError(f"kernel {ctx.spec.name!r}: freshly built entry rejected: {rej}")


# -- the pipeline --------------------------------------------------------------------------------
def single_flight(key1: str, name: str, s: Settings):
    """The cross-process build lock (imported on a miss only: filelock costs ms to import)."""
    from .lock import single_flight as _single_flight

    return _single_flight(key1, name, s)


def _fleet():
    from . import fleet  # imported only when a remote is configured

    return fleet


def _from_fleet(ctx: _Ctx, can_build: bool):
    """Ask the fleet stage; a fetched module is recorded as a hit here. Returns the outcome."""
    fleet = _fleet()
    out = fleet.obtain(fleet.FleetRequest(ctx.spec, ctx.s, ctx.skey() or "", ctx.installation(), ctx.store,
                                          _door(ctx), can_build))
    ctx.refused.extend(out.misses)
    if out.module is not None:
        _hit(ctx, out.entry)
    return out


def _pipeline(spec: KernelSpec, s: Settings) -> tuple[Any, WarmResult]:
    ctx = _Ctx(spec, s, LocalStore(s))
    if not s.rebuild:
        mod, entry = _foreign(ctx, prebuilt.candidates(spec.name, s), strict_external=False)
        if mod is not None:
            events.emit("prebuilt_hit", name=spec.name, entry=entry.entry_id)
            return mod, ctx.result("prebuilt", entry)
    try:
        plan = kinds.make_plan(spec, s)
        l1 = level1.level1(plan, s)
    except ToolchainError as e:
        return _without_toolchain(ctx, e)
    with name_lock(spec.name):
        look = _LocalLook(reason="rebuild requested", code="rebuild") if s.rebuild else _local(ctx, plan, l1)
        if look.module is not None:
            _hit(ctx, look.entry)
            events.emit("hit", name=spec.name, entry=look.entry.entry_id)
            return look.module, ctx.result("hit", look.entry)
        if not s.rebuild and ctx.skey():
            mod, entry = _foreign(ctx, ctx.store.fetched(spec.name, ctx.skey()), strict_external=True)
            if mod is not None:
                _hit(ctx, entry)
                events.emit("hit", name=spec.name, entry=entry.entry_id, fetched=True)
                return mod, ctx.result("hit", entry, "fetched earlier from the fleet cache")
        events.emit("miss", name=spec.name, reason=look.reason, reason_code=look.code)
        if s.no_build and not s.remote_enabled:
            raise CacheMissError(spec.name, look.reason, ctx.refused)
        with single_flight(l1.key, spec.name, s):
            if not s.rebuild:  # double-checked: another process may have published meanwhile
                again = _local(ctx, plan, l1)
                if again.module is not None:
                    _hit(ctx, again.entry)
                    events.emit("hit", name=spec.name, entry=again.entry.entry_id, after_wait=True)
                    return again.module, ctx.result("hit", again.entry, "built by another process")
            lease = None
            if s.remote_enabled and not s.rebuild and ctx.skey():
                got = _from_fleet(ctx, can_build=not s.no_build)
                if got.module is not None:
                    return got.module, ctx.result("remote", got.entry, f"fetched from {got.remote}")
                lease = got.lease
            if s.no_build:
                raise CacheMissError(spec.name, look.reason, ctx.refused)
            try:
                with _fleet().lease_kept(lease, s.remote.lease_ttl, spec.name) if lease is not None \
                        else nullcontext():
                    mod, entry = _build_and_accept(ctx, plan, l1, look.reason)
                if s.remote_writable:
                    _fleet().upload(s, entry)
            finally:
                if lease is not None:
                    lease.release()
    return mod, ctx.result("built", entry, look.reason)


def _without_toolchain(ctx: _Ctx, err: ToolchainError) -> tuple[Any, WarmResult]:
    """No compiler here (a serving pod): fetched fleet entries and the fleet, else a clear error."""
    spec, s = ctx.spec, ctx.s
    skey = ctx.skey()
    if skey and not s.rebuild:
        with name_lock(spec.name):
            mod, entry = _foreign(ctx, ctx.store.fetched(spec.name, skey), strict_external=True)
            if mod is not None:
                _hit(ctx, entry)
                events.emit("hit", name=spec.name, entry=entry.entry_id, fetched=True)
                return mod, ctx.result("hit", entry, "fetched earlier from the fleet cache")
            if s.remote_enabled:
                with single_flight("skey:" + skey, spec.name, s):
                    got = _from_fleet(ctx, can_build=False)
                    if got.module is not None:
                        return got.module, ctx.result("remote", got.entry, f"fetched from {got.remote}")
    if s.no_build:
        raise CacheMissError(spec.name, f"no usable prebuilt or fleet artifact and no toolchain: {err}",
                             ctx.refused) from err
    raise err


# -- public API ----------------------------------------------------------------------------------
def load_with_result(spec: KernelSpec, settings: Settings | None = None) -> tuple[Any, WarmResult]:
    """Like load(), also returning what happened (hit/built/prebuilt/remote, seconds, reason)."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"kernelcache.load expects a KernelSpec, got {type(spec).__name__}")
    s = resolve(settings)
    with events.logging_to(s.log):
        return _pipeline(spec, s)


def load(spec: KernelSpec, settings: Settings | None = None) -> Any:
    """Build (if needed), validate and load a kernel module; the same object on repeat calls."""
    return load_with_result(spec, settings)[0]


def _warm_one(spec: KernelSpec, s: Settings) -> WarmResult:
    t0 = time.monotonic()
    try:
        return load_with_result(spec, s)[1]
    except Exception as e:  # noqa: BLE001 - reported per spec, never aborts the others
        return WarmResult(spec.name, "failed", time.monotonic() - t0, f"{type(e).__name__}: {e}", error=e)


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

    with ThreadPoolExecutor(max_workers=n) as ex:
        return list(ex.map(lambda sp: _warm_one(sp, s), specs))


def explain(spec: KernelSpec, settings: Settings | None = None) -> dict:
    """See ``kernelcache.diagnose.explain`` (read-only: what a load would do, and why)."""
    from .diagnose import explain as _explain

    return _explain(spec, settings)
