"""load(spec): lookup -> validate -> (lock -> re-lookup -> build -> publish) -> load.

Every path that hands out a module goes through the same validation: manifest schema vs the
spec, file size, sha256 (first load per process), then after dlopen the identity symbol and
every expected function's metadata. Anything that fails is quarantined and rebuilt once; a
second failure raises a precise error. A stale ``.so`` is rejected, never called.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import build, config, events, key, prebuilt, schema, store
from .lock import single_flight
from .errors import BuildError, CacheMissError, KernelCacheError, SchemaMismatch, ToolchainError
from .plan import BuildPlan, make_plan
from .spec import KernelSpec

MANIFEST_FORMAT = 3

_modules: dict[str, Any] = {}  # entry_id -> loaded tvm_ffi.Module (same object on repeat calls)
_verified_sha: set[str] = set()  # .so paths whose sha256 was checked in this process
_dlopened: dict[str, int] = {}  # path -> inode dlopen'ed from that path in this process
_proc_lock = threading.RLock()
_name_locks: dict[str, threading.Lock] = {}


@dataclass
class WarmResult:
    """Outcome of building/loading one spec (what `warm`, the CLI and the plugin report)."""

    name: str
    status: str  # "hit" | "built" | "prebuilt" | "failed"
    seconds: float
    reason: str = ""  # miss reason (why it was built) or failure message
    entry_id: str = ""
    entry_path: str = ""
    error: BaseException | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 3),
                "reason": self.reason, "entry_id": self.entry_id, "entry_path": self.entry_path}


@dataclass
class _Lookup:
    entry: store.Entry | None
    reason: str  # why nothing valid was found
    reason_code: str
    refused: list[str] = field(default_factory=list)


def _name_lock(name: str) -> threading.Lock:
    with _proc_lock:
        return _name_locks.setdefault(name, threading.Lock())


# -- lookup -------------------------------------------------------------------------------------
def _lookup(plan: BuildPlan, l1: key.Level1) -> _Lookup:
    anchors = key.anchors_for(plan)
    refused: list[str] = []
    first_reason = ""
    for entry in store.candidates(plan.spec.name, l1.key):
        m = entry.manifest
        check = key.check_deps(m.get("deps", []), m.get("absent", []), anchors, entry.stat_cache())
        if check.ok:
            if check.refreshed:
                entry.save_stat_cache(check.refreshed)
            return _Lookup(entry, "", "")
        first_reason = first_reason or check.reason
        refused.append(f"{entry.path}: {check.reason}")
    if first_reason:
        return _Lookup(None, first_reason, "dependency_changed", refused)
    return _Lookup(None, _nearest_diff(plan.spec.name, l1), "no_entry", refused)


def _try_prebuilt(spec: KernelSpec) -> tuple[Any, store.Entry | None, list[str]]:
    """First valid artifact from the read-only prebuilt roots; refusals are logged and returned."""
    refused: list[str] = []
    for entry in prebuilt.candidates(spec):
        why = prebuilt.refusal(spec, entry)
        if why is None:
            mod, why, _ = _load_entry(spec, entry)
            if mod is not None:
                return mod, entry, refused
        refused.append(f"prebuilt {entry.path}: {why}")
        events.emit("prebuilt_refused", name=spec.name, entry=str(entry.path), reason=why)
    return None, None, refused


def _nearest_diff(name: str, l1: key.Level1) -> str:
    """Why there is no entry: diff vs the most recently used manifest of the same kernel."""
    entries = store.all_entries(name=name)
    if not entries:
        return "no cached entry for this kernel"
    latest = max(entries, key=lambda e: e.last_used())
    diffs = key.diff_inputs(latest.manifest.get("inputs", {}), l1.inputs)
    return "; ".join(diffs) if diffs else "no entry for this build key"


# -- validation -----------------------------------------------------------------------------------
def _validate_before_dlopen(spec: KernelSpec, entry: store.Entry) -> str | None:
    m = entry.manifest
    if m.get("format") != MANIFEST_FORMAT:
        return f"manifest format {m.get('format')} != {MANIFEST_FORMAT}"
    mism = schema.compare(spec.functions, m.get("schemas", {}))
    if mism:
        return "manifest schema differs: " + "; ".join(f"{k}: expected {a}, found {b}" for k, (a, b) in mism.items())
    sp = str(entry.so_path)
    first = sp not in _verified_sha  # sha256 on the first load per process, size always
    problem = schema.binary_problem(entry.so_path, list(spec.functions), m.get("so_size"),
                                    m.get("so_sha256") if first else None)
    if problem:
        return problem
    _verified_sha.add(sp)
    return None


def _dlopen_path(so_path: Path) -> Path:
    """A path that dlopen has not cached for different bytes.

    dlopen returns the already-loaded handle for a path it has seen, even if the file there was
    replaced (e.g. a rejected entry rebuilt under the same id). Such a file is loaded from a
    private per-process copy instead, so the new bytes really run.
    """
    ino = so_path.stat().st_ino
    with _proc_lock:
        seen = _dlopened.get(str(so_path))
        if seen is None or seen == ino:
            _dlopened[str(so_path)] = ino
            return so_path
    private = store.private_copy(so_path)
    with _proc_lock:
        _dlopened[str(private)] = private.stat().st_ino
    return private


def _dlopen_and_check(spec: KernelSpec, so_path: Path, identity: str) -> tuple[Any, str | None, dict]:
    import tvm_ffi

    try:
        so_path = _dlopen_path(so_path)
        mod = tvm_ffi.load_module(str(so_path))
    except Exception as e:  # noqa: BLE001 - any load failure is a rejection
        return None, f"dlopen failed: {type(e).__name__}: {e}", {}
    ident = schema.read_identity(so_path)
    if ident != identity:
        return None, f"identity {ident!r} != manifest's {identity!r} (binary of another build)", {}
    found = schema.exported_schemas(mod, list(spec.functions))
    mism = schema.compare(spec.functions, found)
    if mism:
        return None, "exported schema differs: " + "; ".join(
            f"{k}: expected {a}, found {b}" for k, (a, b) in mism.items()), mism
    return mod, None, {}


# -- build ----------------------------------------------------------------------------------------
def _build_and_publish(plan: BuildPlan, l1: key.Level1, reason: str) -> store.Entry:
    """Build privately, check schemas (SchemaMismatch: nothing kept), publish atomically."""
    spec = plan.spec
    try:
        bdir = store.new_tmp_dir(l1.key)
    except OSError as e:
        raise KernelCacheError(
            f"kernel {spec.name!r}: cannot create a build directory in the cache "
            f"{config.cache_dir()}: {e}. Point KERNELCACHE_DIR at a writable directory, or use "
            "a prebuilt artifact root (KERNELCACHE_PREBUILT) with KERNELCACHE_NO_BUILD=1") from e
    events.emit("build_start", name=spec.name, reason=reason, n_sources=len(plan.sources), key=l1.key[:16])
    t0 = time.monotonic()
    try:
        out = build.run_build(plan, l1, bdir)
        problem = schema.binary_problem(bdir / plan.so_name, list(spec.functions), out.so_size)
        import tvm_ffi

        mod = tvm_ffi.load_module(str(_dlopen_path(bdir / plan.so_name)))
        found = schema.exported_schemas(mod, list(spec.functions))
        mism = schema.compare(spec.functions, found)
        if mism:
            raise SchemaMismatch(spec.name, mism, where="freshly built from the current sources")
        if problem:
            raise BuildError(spec.name, "<post-link check>", problem)
    except BaseException as e:
        events.emit("build_failed", name=spec.name, seconds=time.monotonic() - t0, error=str(e)[:500])
        build.discard(bdir)
        raise
    manifest = {
        "format": MANIFEST_FORMAT,
        "name": spec.name,
        "key1": l1.key,
        "entry_id": out.entry_id,
        "identity": out.identity,
        "so_name": plan.so_name,
        "so_sha256": out.so_sha256,
        "so_size": out.so_size,
        "schemas": found,
        "inputs": l1.inputs,
        "deps": out.deps,
        "absent": out.absent,
        "build_seconds": round(out.seconds, 3),
        "host": socket.gethostname(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reason": reason,
    }
    import json

    (bdir / store.MANIFEST).write_text(json.dumps(manifest, sort_keys=True, separators=(",", ":")))
    events.emit("build_done", name=spec.name, seconds=out.seconds, entry=out.entry_id)
    if not out.publishable:
        events.emit("race_guard", name=spec.name, reason=out.not_publishable_reason)
        return store.Entry(path=bdir, manifest=manifest)
    dest, won = store.publish(bdir, spec.name, l1.key, out.entry_id)
    if not won:
        events.emit("publish_race_lost", name=spec.name, entry=out.entry_id)
    entry = store.read_entry(dest) or store.Entry(path=dest, manifest=manifest)
    return entry


# -- public API ---------------------------------------------------------------------------------
def _load_entry(spec: KernelSpec, entry: store.Entry) -> tuple[Any, str | None, dict]:
    with _proc_lock:
        mod = _modules.get(entry.entry_id)
    if mod is not None:
        return mod, None, {}
    problem = _validate_before_dlopen(spec, entry)
    if problem:
        return None, problem, {}
    mod, problem, mism = _dlopen_and_check(spec, entry.so_path, entry.manifest.get("identity", ""))
    if mod is not None:
        with _proc_lock:
            _modules[entry.entry_id] = mod
    return mod, problem, mism


def _load_impl(spec: KernelSpec) -> tuple[Any, WarmResult]:
    t0 = time.monotonic()
    pre_refused: list[str] = []
    if not config.rebuild():
        mod, entry, pre_refused = _try_prebuilt(spec)
        if mod is not None and entry is not None:
            events.emit("prebuilt_hit", name=spec.name, entry=entry.entry_id)
            return mod, WarmResult(spec.name, "prebuilt", time.monotonic() - t0, "", entry.entry_id, str(entry.path))
    try:
        plan = make_plan(spec)
        l1 = key.level1(plan)
    except ToolchainError as e:
        if config.no_build():
            raise CacheMissError(spec.name, f"no usable prebuilt artifact and no toolchain: {e}", pre_refused) from e
        raise
    rebuilt_once = False
    forced = config.rebuild()
    with _name_lock(spec.name):
        while True:
            look = _lookup(plan, l1) if not forced else _Lookup(None, "rebuild requested", "rebuild")
            if look.entry is not None:
                mod, problem, mism = _load_entry(spec, look.entry)
                if mod is not None:
                    look.entry.touch_used()
                    events.emit("hit", name=spec.name, entry=look.entry.entry_id)
                    return mod, WarmResult(spec.name, "hit", time.monotonic() - t0, "",
                                           look.entry.entry_id, str(look.entry.path))
                events.emit("quarantine", name=spec.name, reason=problem, entry=look.entry.entry_id)
                store.quarantine(look.entry, problem or "rejected")
                if rebuilt_once:
                    if mism:
                        raise SchemaMismatch(spec.name, mism, where="after rebuild")
                    raise KernelCacheError(f"kernel {spec.name!r}: rebuilt entry rejected: {problem}")
                look = _Lookup(None, f"cached entry rejected: {problem}", "rejected")
            reason = look.reason
            events.emit("miss", name=spec.name, reason=reason, reason_code=look.reason_code)
            if config.no_build():
                raise CacheMissError(spec.name, reason, pre_refused + look.refused)
            with single_flight(l1.key, spec.name, config.cache_dir()):
                # Double-checked: another process may have published while we waited.
                again = _lookup(plan, l1) if not forced else _Lookup(None, reason, "rebuild")
                if again.entry is not None and not rebuilt_once:
                    mod, problem, mism = _load_entry(spec, again.entry)
                    if mod is not None:
                        again.entry.touch_used()
                        events.emit("hit", name=spec.name, entry=again.entry.entry_id, after_wait=True)
                        return mod, WarmResult(spec.name, "hit", time.monotonic() - t0, "built by another process",
                                               again.entry.entry_id, str(again.entry.path))
                    events.emit("quarantine", name=spec.name, reason=problem, entry=again.entry.entry_id)
                    store.quarantine(again.entry, problem or "rejected")
                entry = _build_and_publish(plan, l1, reason)
            forced = False
            mod, problem, mism = _load_entry(spec, entry)
            if mod is not None:
                entry.touch_used()
                return mod, WarmResult(spec.name, "built", time.monotonic() - t0, reason,
                                       entry.entry_id, str(entry.path))
            if rebuilt_once:
                if mism:
                    raise SchemaMismatch(spec.name, mism, where="after rebuild")
                raise KernelCacheError(f"kernel {spec.name!r}: freshly built entry rejected: {problem}")
            events.emit("quarantine", name=spec.name, reason=problem, entry=entry.entry_id)
            store.quarantine(entry, problem or "rejected")
            rebuilt_once = True


def load(spec: KernelSpec) -> Any:
    """Build (if needed), validate and load a kernel module; the same object on repeat calls."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"kernelcache.load expects a KernelSpec, got {type(spec).__name__}")
    mod, _ = _load_impl(spec)
    return mod


def load_with_result(spec: KernelSpec) -> tuple[Any, WarmResult]:
    """Like load(), also returning what happened (hit/built/prebuilt, seconds, reason)."""
    return _load_impl(spec)


def _warm_one(spec: KernelSpec) -> WarmResult:
    t0 = time.monotonic()
    try:
        _, res = _load_impl(spec)
        return res
    except Exception as e:  # noqa: BLE001 - reported per spec, never aborts the others
        return WarmResult(spec.name, "failed", time.monotonic() - t0, f"{type(e).__name__}: {e}", error=e)


def warm(specs: Iterable[KernelSpec], jobs: int | None = None) -> list[WarmResult]:
    """Build/load several specs in parallel; one result per spec, failures included."""
    specs = list(specs)
    if not specs:
        return []
    store.sweep_tmp()
    n = jobs or min(len(specs), max(1, (os.cpu_count() or 2) // 2))
    if n <= 1:
        return [_warm_one(s) for s in specs]
    with ThreadPoolExecutor(max_workers=n) as ex:
        return list(ex.map(_warm_one, specs))


def explain(spec: KernelSpec) -> dict:
    """What the key is made of and why a lookup would miss (diff vs the nearest manifest)."""
    pre = []
    for entry in prebuilt.candidates(spec):
        why = prebuilt.refusal(spec, entry)
        pre.append({"entry": str(entry.path), "usable": why is None, "reason": why or ""})
    plan = make_plan(spec)
    l1 = key.level1(plan)
    look = _lookup(plan, l1)
    usable_pre = next((p for p in pre if p["usable"]), None)
    status = "prebuilt" if usable_pre else ("hit" if look.entry else "miss")
    return {
        "name": spec.name,
        "key1": l1.key,
        "inputs": l1.inputs,
        "status": status,
        "entry": usable_pre["entry"] if usable_pre else (str(look.entry.path) if look.entry else None),
        "reason": look.reason,
        "refused": [f"prebuilt {p['entry']}: {p['reason']}" for p in pre if not p["usable"]] + look.refused,
        "prebuilt": pre,
    }
