"""Per-test outcomes for the JSON report, built from the reports the controller receives.

Why the plugin records them itself: JUnit XML loses reruns and cannot carry session totals
under xdist, and ``--kc-failed-from`` needs exactly "which node ids failed or errored" from a
previous run's artifact. The controller sees every phase report (xdist forwards them), so one
record per node id is folded from its setup/call/teardown reports.
"""
from __future__ import annotations

from typing import Any

import pytest

OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")


def phase_outcome(report: pytest.TestReport) -> str:
    """passed/failed/skipped/xfailed/xpassed/rerun for a call; passed/error/skipped otherwise."""
    xf = hasattr(report, "wasxfail")
    if report.when == "call":
        if xf:
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped:
        return "xfailed" if xf else "skipped"
    return "passed"


def final_outcome(phases: dict[str, str]) -> str | None:
    """The test's outcome from its phases so far (None while undecided, e.g. between reruns)."""
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup in ("error", "skipped", "xfailed"):
        return setup
    if call is None or call == "rerun":
        return None
    if teardown == "error" and call == "passed":
        return "error"
    return call


def record(tests: dict[str, dict], report: pytest.TestReport) -> None:
    """Fold one phase report into ``tests[nodeid]``."""
    t = tests.setdefault(report.nodeid, {
        "nodeid": report.nodeid, "outcome": None, "duration": 0.0, "phases": {}, "attempts": 0,
        "kernels": [], "gpu": False, "worker": None})
    t["duration"] = round(t["duration"] + float(report.duration or 0.0), 6)
    phase = phase_outcome(report)
    t["phases"][report.when] = phase
    if report.when == "call":
        t["attempts"] += 1
    t["kernels"] = list(getattr(report, "kernelcache_kernels", None) or t["kernels"])
    t["gpu"] = t["gpu"] or bool(getattr(report, "kernelcache_gpu", False))
    node: Any = getattr(report, "node", None)
    if node is not None:
        t["worker"] = getattr(getattr(node, "gateway", None), "id", None)
    t["outcome"] = final_outcome(t["phases"])
    if phase == "skipped" and isinstance(report.longrepr, tuple):
        t["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif phase in ("failed", "error") and report.longrepr is not None:
        t["message"] = report.longreprtext[-2000:]
    elif phase in ("xfailed", "xpassed"):
        t["reason"] = getattr(report, "wasxfail", "")


def needed_kernels(tests: dict[str, dict]) -> set[str]:
    """Kernels named by tests that ran (not skipped): a failure of one fails the session."""
    return {n for t in tests.values() if t["outcome"] not in (None, "skipped") for n in t["kernels"]}
