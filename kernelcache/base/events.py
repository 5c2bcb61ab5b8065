"""Structured events and process-wide counters (hit, miss + reason, build, wait, remote, ...).

Why counters live here and not in the loader: the CLI, the pytest plugin and ``kc.stats()``
all report the same facts, per process and per kernel, whatever path produced them (a shipped
kernel, a drop-in ``load_inline`` kernel, a remote fetch).

Log target (``Settings.log``): None -> only progress lines on stderr (a cold build can take
minutes; users must see why the process is busy); "0" -> silent; "1"/"stderr" -> every event
as JSON on stderr; any other value -> every event appended as JSON lines to that file.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from enum import Enum
from typing import Any, Callable, Iterator

from . import process_state


class Word(str, Enum):
    """An outcome word: a ``str`` (JSON, reports and comparisons see its value), typed in code."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    # equal to its word, so hashed as its word (Enum hashes the member's name): a dict keyed by
    # members answers for the word that crossed the JSON or xdist boundary, and the other way round
    __hash__ = str.__hash__


class Status(Word):
    """What one load did (``WarmResult.status``; the CLI, the plugin and ``warm`` report it)."""

    HIT = "hit"
    BUILT = "built"
    PREBUILT = "prebuilt"
    REMOTE = "remote"
    FAILED = "failed"
    SKIPPED = "skipped"


class Miss(Word):
    """Why the local cache had no usable entry (the ``miss`` event's ``reason_code``)."""

    NO_ENTRY = "no_entry"
    DEPENDENCY_CHANGED = "dependency_changed"
    REJECTED = "rejected"
    REBUILD = "rebuild"


class Place(Word):
    """Where an entry on disk comes from, in lookup order (``Entry.origin``); the fleet itself is
    the stage beside the loop (``kernelcache.lookup.fleet``), whose downloads arrive as ``fetched``."""

    PREBUILT = "prebuilt"
    LOCAL = "local"
    FETCHED = "fetched"


class Upload(Word):
    """What publishing one entry to the fleet cache did (``kc.push`` rows, ``fleet.upload``)."""

    UPLOADED = "uploaded"  # our envelope is the entry
    EXISTS = "exists"  # an intact entry was there: nothing written
    REPAIRED = "repaired"  # it was there; a damaged or missing blob re-uploaded from our bytes
    REPLACED = "replaced"  # its envelope was broken: swapped for ours
    SKIPPED = "skipped"  # not pushed (not built here, no source key, bytes not its manifest's)
    FAILED = "failed"


class Explained(Word):
    """What ``explain`` says a load would do: take the entry of a place, fetch one from the fleet,
    or miss (``explain``'s ``status``)."""

    PREBUILT = "prebuilt"
    HIT = "hit"  # a local entry
    FETCHED = "fetched"  # fetched from the fleet earlier
    REMOTE = "remote"  # the fleet has one
    MISS = "miss"


class RejectCode(Word):
    """Why an entry may not be used, in one word (``validate.Rejection.code``: counted, reported
    in the quarantine event); the precise reason is the rejection's ``detail``."""

    FORMAT = "format"  # the manifest: its format version, its kernel, its kind
    SCHEMA = "schema"  # the manifest's schemas differ from the spec's
    BINARY = "binary"  # the binary file: name, size, checksum, magic, exported symbols
    DLOPEN = "dlopen"
    IDENTITY = "identity"  # the binary is not its manifest's build
    EXPORTED_SCHEMA = "exported_schema"
    SURFACE = "surface"  # a torch-kind binary's exported surface
    INSTALLATION = "installation"  # an entry built elsewhere does not fit this host or spec
    DEPS = "deps"  # a recorded dependency changed
    CPU = "cpu"  # -march=native for a CPU with features this one lacks
    TRUST = "trust"  # an entry others could have written


class Event(Word):
    """What happened, as the event log, the progress lines and the counters name it."""

    HIT = "hit"
    PREBUILT_HIT = "prebuilt_hit"
    MISS = "miss"
    QUARANTINE = "quarantine"
    PREBUILT_REFUSED = "prebuilt_refused"
    LOCAL_REFUSED = "local_refused"
    FETCHED_REFUSED = "fetched_refused"
    BUILD_START = "build_start"
    BUILD_PROGRESS = "build_progress"
    BUILD_DONE = "build_done"
    BUILD_FAILED = "build_failed"
    RACE_GUARD = "race_guard"
    PUBLISH_RACE_LOST = "publish_race_lost"
    LOCK_UNUSABLE = "lock_unusable"
    LOCK_WAIT_START = "lock_wait_start"
    LOCK_WAIT = "lock_wait"
    LOCK_ACQUIRED = "lock_acquired"
    LOCK_WAIT_PUBLISHED = "lock_wait_published"  # a waiter saw the holder publish: no lock taken
    EXTENSION_LOADED = "extension_loaded"
    REMOTE_DOWN = "remote_down"
    REMOTE_ERROR = "remote_error"
    REMOTE_MISS = "remote_miss"
    REMOTE_HIT = "remote_hit"
    REMOTE_LEASE_LOST = "remote_lease_lost"
    REMOTE_LEASE_WAIT = "remote_lease_wait"
    REMOTE_LEASE_WAIT_PROGRESS = "remote_lease_wait_progress"
    REMOTE_LEASE_WAIT_DONE = "remote_lease_wait_done"
    REMOTE_UPLOAD = "remote_upload"
    REMOTE_UPLOAD_EXISTS = "remote_upload_exists"
    REMOTE_REPAIR = "remote_repair"
    CACHE_REMOVED = "cache_removed"  # the cache dir was removed while building (built once more)
    UNSAFE_DIRECTORY = "unsafe_directory"  # a cache dir or prebuilt root other users can write
    LOCK_DRIFT = "lock_drift"  # KERNELCACHE_LOCK_MODE=warn: the kernel lock does not describe this load
    LOCK_REFUSED = "lock_refused"  # KERNELCACHE_LOCK: a load refused before any build step

# the event a refusal in each place (but the local cache's, handled in place) emits
REFUSED = {Place.PREBUILT: Event.PREBUILT_REFUSED, Place.LOCAL: Event.LOCAL_REFUSED,
           Place.FETCHED: Event.FETCHED_REFUSED}

_lock = threading.Lock()
_counters: Counter = Counter()
_miss_reasons: Counter = Counter()
_floats: dict[str, float] = {"build_seconds": 0.0, "wait_seconds": 0.0}
_per_kernel: dict[str, Counter] = defaultdict(Counter)
_per_kernel_reasons: dict[str, Counter] = defaultdict(Counter)
_phase = {"ready": False}  # mark_ready(): compiles from then on are compiles after ready
_PROGRESS = {
    Event.BUILD_START, Event.BUILD_PROGRESS, Event.BUILD_DONE, Event.BUILD_FAILED, Event.LOCK_WAIT, Event.LOCK_UNUSABLE,
    Event.QUARANTINE, Event.RACE_GUARD, Event.REMOTE_DOWN, Event.REMOTE_LEASE_WAIT, Event.REMOTE_HIT,
    Event.REMOTE_UPLOAD, Event.REMOTE_MISS, Event.REMOTE_REPAIR, Event.CACHE_REMOVED, Event.LOCK_DRIFT,
}
# event -> per-kernel counter name (what the plugin summary and `kernelcache stats` show)
_KERNEL_COUNTERS = {
    Event.HIT: "hits", Event.PREBUILT_HIT: "prebuilt_hits", Event.REMOTE_HIT: "remote_hits", Event.MISS: "misses",
    Event.BUILD_DONE: "builds", Event.BUILD_FAILED: "build_failures", Event.QUARANTINE: "quarantined",
    Event.REMOTE_MISS: "remote_misses", Event.REMOTE_UPLOAD: "uploads", Event.REMOTE_LEASE_WAIT: "lease_waits",
    Event.REMOTE_ERROR: "remote_errors", Event.LOCK_WAIT_START: "lock_waits", Event.REMOTE_REPAIR: "repairs",
}
_target: ContextVar[str | None] = ContextVar("kernelcache_log_target", default=None)
_listeners: list[Callable[[str, dict], None]] = []  # in-process observers (the plugin's impact recorder)


def add_listener(fn: Callable[[str, dict], None]) -> None:
    """Call ``fn(event, fields)`` for every event of this process (until removed).

    Why: the pytest plugin records which kernels each test loaded (test impact selection);
    a listener that raises is ignored, so an observer can never break a load."""
    with _lock:
        if fn not in _listeners:
            _listeners.append(fn)


def remove_listener(fn: Callable[[str, dict], None]) -> None:
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)


@contextmanager
def logging_to(target: str | None) -> Iterator[None]:
    """Send the events of the calls inside (this thread/task) to ``target`` (a Settings.log)."""
    token = _target.set(target)
    try:
        yield
    finally:
        _target.reset(token)


def emit(event: Event, **fields: Any) -> None:
    """Count an event (globally and per kernel) and log it to the current target."""
    name = fields.get("name")
    with _lock:
        _counters[event] += 1
        if event == Event.MISS:
            _miss_reasons[str(fields.get("reason_code", "unknown"))] += 1
        if event == Event.BUILD_DONE:
            _floats["build_seconds"] += float(fields.get("seconds", 0.0))
        if event == Event.BUILD_START and _phase["ready"] and name:
            _counters["compiles_after_ready"] += 1
            _per_kernel[name]["compiles_after_ready"] += 1
        if event in (Event.LOCK_ACQUIRED, Event.LOCK_WAIT_PUBLISHED):
            _floats["wait_seconds"] += float(fields.get("waited", 0.0))
        kind = fields.get("kind")
        if kind and name:  # a label the report shows (a count, so xdist merges it)
            _per_kernel[name][f"kind:{kind}"] = 1
        counter = _KERNEL_COUNTERS.get(event)
        if counter and name:
            _per_kernel[name][counter] += 1
            if event in (Event.MISS, Event.REMOTE_MISS, Event.REMOTE_ERROR):
                _per_kernel_reasons[name][f"{counter}:{fields.get('reason_code', 'unknown')}"] += 1
            if event in (Event.BUILD_DONE, Event.BUILD_FAILED):  # a failed build took its time too
                _per_kernel[name]["build_ms"] += int(1000 * float(fields.get("seconds", 0.0)))
        listeners = tuple(_listeners)
    for fn in listeners:
        try:
            fn(event, fields)
        except Exception:  # noqa: BLE001 - an observer never breaks a load
            pass
    target = _target.get()
    if target == "0":
        return
    if target in (None, ""):
        if event in _PROGRESS and not (event == Event.REMOTE_MISS and fields.get("reason_code") == "remote_no_entry"):
            print(f"[kernelcache] {_human(event, fields)}", file=sys.stderr, flush=True)
        return
    record = {"t": round(time.time(), 3), "event": event, "pid": os.getpid(), **fields}
    line = json.dumps(record, default=str)
    if target in ("1", "stderr"):
        print(line, file=sys.stderr, flush=True)
    else:
        try:
            with open(target, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass


def _human(event: Event, f: dict) -> str:
    name = f.get("name", "?")
    texts = {
        Event.BUILD_START: lambda: f"building {name} ({f.get('reason', 'miss')}): "
                                   f"{f.get('n_sources', '?')} source(s) ...",
        Event.BUILD_PROGRESS: lambda: f"still building {name} ({f.get('seconds', 0):.0f}s so far) ...",
        Event.BUILD_DONE: lambda: f"built {name} in {f.get('seconds', 0):.1f}s",
        Event.BUILD_FAILED: lambda: f"build of {name} " + ("interrupted" if f.get("interrupted") else "failed")
                                    + f" after {f.get('seconds', 0):.1f}s",
        Event.LOCK_WAIT: lambda: f"waiting {f.get('waited', 0):.0f}s for {name}: build lock held by "
                                 f"{f.get('holder', '?')}",
        Event.LOCK_UNUSABLE: lambda: f"building {name} without the build lock: {f.get('error')}",
        Event.QUARANTINE: lambda: f"rejected cached {name} ({f.get('reason')}); moved to quarantine, rebuilding",
        Event.RACE_GUARD: lambda: f"{name}: {f.get('reason')}; not publishing this build",
        Event.CACHE_REMOVED: lambda: f"the cache was removed while building {name} ({f.get('path')} is gone); "
                                     "building it once more",
        Event.REMOTE_DOWN: lambda: f"fleet cache {f.get('remote')} unavailable ({f.get('reason')}); this process "
                               "goes on with its local cache",
        Event.REMOTE_MISS: lambda: f"refused {name} entry {str(f.get('entry', ''))[:12]} from {f.get('remote')} "
                               f"({f.get('reason_code')}: {f.get('reason')})",
        Event.REMOTE_REPAIR: lambda: f"{f.get('status')} damaged fleet entry of {name} on {f.get('remote')}",
        Event.REMOTE_LEASE_WAIT: lambda: f"waiting {f.get('waited', 0):.0f}s for {name}: being compiled by "
                                     f"{f.get('holder', '?')} (fleet lease)",
        Event.REMOTE_HIT: lambda: f"fetched {name} from {f.get('remote')} in {f.get('seconds', 0):.2f}s" + (
            f" ({f['refused']} other entr{'y' if f['refused'] == 1 else 'ies'} of this source key refused first, "
            f"e.g. {f.get('refused_reason')})" if f.get("refused") else ""),
        Event.REMOTE_UPLOAD: lambda: f"uploaded {name} to {f.get('remote')}",
        Event.LOCK_DRIFT: lambda: f"{name}: {f.get('reason')} (kernel lock {f.get('lock')}, warn mode: loading anyway)",
    }
    text = texts.get(event)
    return text() if text else f"{event} {f}"


def stats() -> dict[str, Any]:
    """Counters of this process: hits, misses (by reason), builds, waits, remote; and per kernel."""
    _replay_recalled()
    with _lock:
        kernels = {}
        for name in sorted(set(_per_kernel) | set(_per_kernel_reasons)):
            row = dict(_per_kernel[name])
            row["build_seconds"] = round(row.pop("build_ms", 0) / 1000, 3)
            reasons = dict(_per_kernel_reasons[name])
            if reasons:
                row["reasons"] = reasons
            kernels[name] = row
        return {
            "hits": _counters[Event.HIT],
            "prebuilt_hits": _counters[Event.PREBUILT_HIT],
            "remote_hits": _counters[Event.REMOTE_HIT],
            "misses": _counters[Event.MISS],
            "miss_reasons": dict(_miss_reasons),
            "builds": _counters[Event.BUILD_DONE],
            "build_failures": _counters[Event.BUILD_FAILED],
            "build_seconds": round(_floats["build_seconds"], 3),
            "lock_waits": _counters[Event.LOCK_WAIT_START],
            "wait_seconds": round(_floats["wait_seconds"], 3),
            "quarantined": _counters[Event.QUARANTINE],
            "publish_races_lost": _counters[Event.PUBLISH_RACE_LOST],
            "remote_misses": _counters[Event.REMOTE_MISS],
            "uploads": _counters[Event.REMOTE_UPLOAD],
            "lease_waits": _counters[Event.REMOTE_LEASE_WAIT],
            "remote_errors": _counters[Event.REMOTE_ERROR],
            "repairs": _counters[Event.REMOTE_REPAIR],
            "compiles_after_ready": _counters["compiles_after_ready"],
            "ready": _phase["ready"],
            "kernels": kernels,
        }


def mark_ready() -> None:
    """This process is ready to serve (``kernelcache.lockfile.preload`` finished; the pytest plugin
    warmed its kernels): every compile from now on is counted as a compile after ready."""
    with _lock:
        _phase["ready"] = True


def reset_stats() -> None:
    with _lock:
        _phase["ready"] = False
        _counters.clear()
        _miss_reasons.clear()
        _per_kernel.clear()
        _per_kernel_reasons.clear()
        for k in _floats:
            _floats[k] = 0.0


process_state.register("events.counters", reset_stats)


def _replay_recalled() -> None:
    """Hits ``kernelcache.lookup.recall`` served while this module was not imported (a recalled load
    does not import it), counted now as the hits they were. Looked up in ``sys.modules``: if
    recall was never imported, it holds none (and recall imports this module, not the reverse)."""
    recall = sys.modules.get(__name__.partition(".")[0] + ".lookup.recall")
    pending = getattr(recall, "UNREPORTED", None)
    while pending:
        name, eid, edir, root, kind = pending.pop(0)
        emit(Event.HIT, name=name, entry=eid, recalled=True, entry_dir=edir, root=root, kind=kind)


_replay_recalled()
