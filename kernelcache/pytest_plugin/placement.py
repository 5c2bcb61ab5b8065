"""``--kc-runner`` / ``--kc-placed``: run only the tests of a file that are placed on this runner.

Why: ``ci/rerun-test`` and ``ci/affected-tests`` list a file whose tests sit on several CI
runners (a CPU test beside a ``suite(..., "gpu-h200")`` test) on each of them; each runner's
pytest gets the whole file (or class) and must leave out the scopes placed elsewhere, or the
CPU runner tries the GPU test and the GPU runner runs the CPU tests again.

Why not pytest's ``--deselect``: it matches a string prefix, so ``f.py::test_gpu`` would also drop
``f.py::test_gpu_extra``, and it cannot take back a CPU test nested in a GPU class. Here a scope
is a node (the test, its parametrizations, or a class's tests) and the longest ``--kc-placed``
scope that holds a test decides where it runs; a test no scope holds stays.
"""
from __future__ import annotations

from pathlib import Path

import pytest

_KEY = pytest.StashKey[dict]()


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption("--kc-runner", dest="kc_runner", default=None, metavar="LABEL",
                    help="this machine's CI runner label; with --kc-placed, tests placed on another "
                         "runner are deselected")
    group.addoption("--kc-placed", dest="kc_placed", action="append", default=None, metavar="SCOPE=LABEL",
                    help="tests under the node id SCOPE (file::Class or file::test) run on runner LABEL "
                         "(the longest SCOPE holding a test wins); repeatable; needs --kc-runner")


def parse(config: pytest.Config) -> dict | None:
    """The checked options, or None when no scope is placed; bad input is a usage error."""
    raw = config.getoption("kc_placed", None) or []
    runner = (config.getoption("kc_runner", None) or "").strip()
    if not raw:
        return None
    if not runner:
        raise pytest.UsageError("kernelcache: --kc-placed needs --kc-runner=LABEL (this machine's runner)")
    base = config.invocation_params.dir
    scopes: list[tuple[Path, str, str]] = []
    for value in raw:
        scope, sep, label = str(value).rpartition("=")
        path, _, rest = scope.partition("::")
        if not sep or not path or not label.strip():
            raise pytest.UsageError(f"kernelcache: --kc-placed={value!r}: write SCOPE=LABEL, "
                                    "e.g. tests/test_x.py::test_gpu=gpu-h200")
        scopes.append(((base / path).resolve(), rest, label.strip()))
    return {"runner": runner, "scopes": scopes}


def _holds(rest: str, item_rest: str) -> bool:
    return not rest or item_rest == rest or item_rest.startswith((rest + "::", rest + "["))


def runner_of(item: pytest.Item, scopes: list[tuple[Path, str, str]]) -> str | None:
    """The runner of the longest placed scope holding ``item`` (None: no scope holds it)."""
    item_rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else ""
    best: tuple[int, str] | None = None
    for path, rest, label in scopes:
        if Path(item.path) == path and _holds(rest, item_rest) and (best is None or len(rest) >= best[0]):
            best = (len(rest), label)
    return best[1] if best else None


def configure(config: pytest.Config) -> None:
    """Check the options once, at configure time (a usage error before anything is collected)."""
    config.stash[_KEY] = parse(config) or {}


def deselect(config: pytest.Config, items: list[pytest.Item]) -> int:
    """Drop the tests placed on another runner (reported as deselected); how many."""
    opts = config.stash.get(_KEY, None)
    if not opts:
        return 0
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        label = runner_of(item, opts["scopes"])
        (dropped if label is not None and label != opts["runner"] else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    return len(dropped)
