"""pytest-xdist: what the controller hands each worker, and what workers send back.

Why: workers must gate and load exactly like the controller decided (same hardware view, same
settings, same warm results, so a failed kernel is not retried N times), and only the
controller reports. Down: ``workerinput`` (hook ``pytest_configure_node``). Up: each worker's
loader counters (``kernelcache.base.events.stats()``, per kernel included), its own warm results and
its kernel uses through ``workeroutput``, merged in ``pytest_testnodedown``. The hook class is
registered only when xdist is loaded (its hook names are unknown to pytest otherwise).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from kernelcache.base.events import Status

from .options import PLUGIN_NAME

if TYPE_CHECKING:  # pragma: no cover
    from .state import SessionState

# Which of two results for one kernel the merged report shows: the most telling one.
_SEVERITY = {Status.FAILED: 5, Status.BUILT: 4, Status.REMOTE: 3, Status.HIT: 2, Status.PREBUILT: 1, Status.SKIPPED: 0}


class XdistHooks:
    """Hooks of pytest-xdist, registered in the controller only when xdist is loaded."""

    def __init__(self, state: "SessionState"):
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[PLUGIN_NAME] = worker_payload(self.state)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = getattr(node, "workeroutput", None) or {}
        if PLUGIN_NAME in out:
            merge_worker(self.state, node.gateway.id, out[PLUGIN_NAME])


def worker_payload(state: "SessionState") -> dict:
    from .settings_bridge import to_wire

    return {"active": True, "options": {d: list(v) for d, v in state.opts.items()},
            "settings": to_wire(state.settings), "arch": state.arch_text,
            "results": state.kernels.results if state.kernels else {}, "hw": state.hw,
            "declared": state.declared}


def worker_output(state: "SessionState") -> dict:
    """What a worker sends back at session finish."""
    from kernelcache.base import events

    wid = state.worker_id
    kernels = state.kernels
    return {"stats": events.stats(),
            "results": {n: r for n, r in kernels.results.items() if r.get("where") == wid},
            "uses": {n: dict(c) for n, c in kernels.uses.items()}}


def merge_worker(state: "SessionState", worker_id: str, out: dict) -> None:
    state.worker_out[worker_id] = out
    results = state.kernels.results
    for n, r in (out.get("results") or {}).items():
        cur = results.get(n)
        if cur is None or _SEVERITY.get(r["status"], 0) > _SEVERITY.get(cur["status"], 0):
            results[n] = r


def merge_counts(parts: Iterable[dict]) -> dict:
    """Sum counter dicts recursively (ints, floats, nested dicts such as per-kernel stats and
    miss reasons); other values are ignored."""
    total: dict[str, Any] = {}
    for part in parts:
        for k, v in (part or {}).items():
            if isinstance(v, dict):
                total[k] = merge_counts([total.get(k) or {}, v])
            elif isinstance(v, bool):
                continue
            elif isinstance(v, (int, float)):
                s = total.get(k, 0) + v
                total[k] = round(s, 3) if isinstance(s, float) else s
    return total
