"""Structured events and process-wide counters (hit, miss + reason, build, wait, quarantine).

KERNELCACHE_LOG: unset -> only build progress lines on stderr (a cold build can take minutes,
users must see why the process is busy); "0" -> silent; "1"/"stderr" -> every event as JSON on
stderr; any other value -> every event appended as JSON lines to that file.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

from .config import log_target

_lock = threading.Lock()
_counters: Counter = Counter()
_miss_reasons: Counter = Counter()
_floats: dict[str, float] = {"build_seconds": 0.0, "wait_seconds": 0.0}
_PROGRESS = {"build_start", "build_progress", "build_done", "build_failed", "lock_wait", "quarantine", "race_guard"}


def emit(event: str, **fields: Any) -> None:
    """Count an event and log it according to KERNELCACHE_LOG."""
    with _lock:
        _counters[event] += 1
        if event == "miss":
            _miss_reasons[str(fields.get("reason_code", "unknown"))] += 1
        if event == "build_done":
            _floats["build_seconds"] += float(fields.get("seconds", 0.0))
        if event == "lock_acquired":
            _floats["wait_seconds"] += float(fields.get("waited", 0.0))
    target = log_target()
    if target == "0":
        return
    if target in (None, ""):
        if event in _PROGRESS:
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


def _human(event: str, f: dict) -> str:
    name = f.get("name", "?")
    if event == "build_start":
        return f"building {name} ({f.get('reason', 'miss')}): {f.get('n_sources', '?')} source(s) ..."
    if event == "build_progress":
        return f"still building {name} ({f.get('seconds', 0):.0f}s so far) ..."
    if event == "build_done":
        return f"built {name} in {f.get('seconds', 0):.1f}s"
    if event == "build_failed":
        return f"build of {name} failed after {f.get('seconds', 0):.1f}s"
    if event == "lock_wait":
        return (f"waiting {f.get('waited', 0):.0f}s for {name}: build lock held by {f.get('holder', '?')}")
    if event == "quarantine":
        return f"rejected cached {name} ({f.get('reason')}); moved to quarantine, rebuilding"
    if event == "race_guard":
        return f"{name}: {f.get('reason')}; not publishing this build"
    return f"{event} {f}"


def stats() -> dict[str, Any]:
    """Counters of this process: hits, misses (by reason), builds, build seconds, waits."""
    with _lock:
        return {
            "hits": _counters["hit"],
            "prebuilt_hits": _counters["prebuilt_hit"],
            "misses": _counters["miss"],
            "miss_reasons": dict(_miss_reasons),
            "builds": _counters["build_done"],
            "build_failures": _counters["build_failed"],
            "build_seconds": round(_floats["build_seconds"], 3),
            "lock_waits": _counters["lock_wait_start"],
            "wait_seconds": round(_floats["wait_seconds"], 3),
            "quarantined": _counters["quarantine"],
            "publish_races_lost": _counters["publish_race_lost"],
        }


def reset_stats() -> None:
    with _lock:
        _counters.clear()
        _miss_reasons.clear()
        for k in _floats:
            _floats[k] = 0.0
