"""The module-level pytest hooks (always registered through the ``pytest11`` entry point).

Why so little here: installed, the plugin is imported by every pytest run, asked for or not.
These hooks register options and markers, resolve ``--kc-run`` / ``--kc-failed-from`` before
collection, and — only when the plugin was asked for — build the session state (options,
hardware, one :class:`~kernelcache.base.settings.Settings`) and register :class:`.SessionPlugin`.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from . import gating, impact, impact_record, names, options, placement
from .activation import NotEnabledHints, asked_for, given_kc_flags
from .lockfile import LockHooks
from .options import PLUGIN_NAME
from .session import SessionPlugin
from .settings_bridge import arch_source, build_settings, export_env, from_wire, restore_env
from .state import STATE, SessionState

MARKERS = (
    "kernel(name, ..., no_build=None): the kernels a test needs (warmed before tests run; the test "
    "errors naming the kernel if it failed to build). Needs -p kernelcache.",
    "gpu(count=1, min_arch=None): needs COUNT GPUs with compute capability >= MIN_ARCH (e.g. '9.0'); "
    "skipped with the specific reason otherwise (failed under --kc-require-gpu).",
    "suite(stage, runner=None): the CI suite (stage) and runner label of a test file, class or "
    "test; read statically by ci/rerun-test and ci/affected-tests (the closest marker wins).",
)


FAILED_FROM = pytest.StashKey[tuple[str, list[str]]]()  # --kc-failed-from: (report, the tests it named)
_SHOW = 10


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What ``--kc-failed-from`` selected, said before the run (it was silent)."""
    got = config.stash.get(FAILED_FROM, None)
    if not got:
        return []
    report, ids = got
    shown = ids if config.option.verbose > 0 else ids[:_SHOW]
    more = f" ... and {len(ids) - len(shown)} more (-v lists all)" if len(ids) > len(shown) else ""
    return [f"kernelcache: --kc-failed-from {report}: {len(ids)} test(s) that failed or errored there: "
            + ", ".join(shown) + more]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)
    placement.add_options(parser.getgroup(PLUGIN_NAME))
    impact.add_ini(parser)
    impact_record.add_ini(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """``--kc-run NAME...`` / ``--kc-failed-from REPORT``: turn names or a previous report's
    failures into test arguments before collection (controller and workers alike)."""
    options.check_path_forms(early_config)
    if asked_for(early_config):
        impact_record.watch_early(early_config)  # before the initial conftests are imported
    ns = early_config.known_args_namespace
    failed_from = getattr(ns, "kc_failed_from", None)
    if failed_from:
        if not asked_for(early_config):
            raise pytest.UsageError("--kc-failed-from needs the kernelcache plugin: add -p kernelcache")
        try:
            ids = names.failed_from_report(Path(failed_from), early_config.rootpath,
                                           early_config.invocation_params.dir)
        except names.SelectionError as e:
            raise pytest.UsageError(str(e)) from None
        args[:0] = ids
        early_config.stash[FAILED_FROM] = (str(failed_from), ids)
    specs = getattr(ns, "kc_run", None)
    if not specs:
        return
    if not asked_for(early_config):
        raise pytest.UsageError("--kc-run needs the kernelcache plugin: add -p kernelcache")
    roots = [Path(p) for p in early_config.getini("kernelcache_test_roots")]
    if not roots:
        roots = names.default_roots(early_config.rootpath, early_config.getini("testpaths"))
    try:
        resolved = names.resolve(specs, roots, early_config.rootpath, early_config.invocation_params.dir)
    except names.SelectionError as e:
        raise pytest.UsageError(str(e)) from None
    # In front: appended after a trailing `--kc-run A B` they would be swallowed by its nargs="+".
    args[:0] = [r.arg for r in resolved]


def pytest_configure(config: pytest.Config) -> None:
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    if not asked_for(config):
        given = given_kc_flags(config)
        if given:
            raise pytest.UsageError(f"{', '.join(given)}: the kernelcache plugin is not enabled; "
                                    "add -p kernelcache")
        config.pluginmanager.register(NotEnabledHints(config), "kernelcache-not-enabled")
        return
    state = _worker_state(config) if hasattr(config, "workerinput") else _controller_state(config)
    if state.settings.patch:
        _arm_patches(state)
    if not state.is_worker:  # workers inherit the controller's exported environment
        state.saved_env = export_env(state.settings)
    config.stash[STATE] = state
    placement.configure(config)
    config.pluginmanager.register(SessionPlugin(state), "kernelcache-session")
    config.pluginmanager.register(LockHooks(state), "kernelcache-lockfile")  # compiles after ready
    impact.configure(config, state)
    if config.pluginmanager.hasplugin("xdist") and not state.is_worker:
        from .xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(state), "kernelcache-xdist")


def _controller_state(config: pytest.Config) -> SessionState:
    """Resolve options, find the hardware (once, here, before any xdist worker exists) and
    build the session's Settings."""
    env, old_used = options.read_environ(config)
    opts = options.resolve(config, env, old_used)
    hw: dict = {}
    if not (config.option.help or config.option.version):
        hw = gating.find_hardware(opts["hardware"][0], env)
    settings, detected = build_settings(opts, gating.detected_archs(hw))
    return SessionState(config, opts, settings, hw, arch_source(opts, settings, detected))


def _worker_state(config: pytest.Config) -> SessionState:
    """A worker takes the controller's decisions as they are (no second probe or resolution)."""
    payload = config.workerinput.get(PLUGIN_NAME) or {}  # type: ignore[attr-defined]
    if "options" not in payload:  # a controller that did not send its decisions: decide here
        return _controller_state(config)
    opts = {d: tuple(v) for d, v in payload["options"].items()}
    state = SessionState(config, opts, from_wire(payload["settings"]), dict(payload.get("hw") or {}),
                         payload.get("arch", ""))
    state.kernels.results = {n: dict(r) for n, r in (payload.get("results") or {}).items()}
    state.declared = list(payload.get("declared") or [])
    return state


def _arm_patches(state: SessionState) -> None:
    """--kc-patch / --kc-patch-tvm-ffi: install each drop-in with the session's settings as the
    base of every call, as soon as its target module is imported (at once if it already is)."""
    from kernelcache import patch

    raw = str(state.opts.get("patch", (None, ""))[0] or "").lower()
    try:
        state.patched = patch.arm(state.settings.patch, state.settings, strict="all" not in raw)
    except patch.PatchError as e:
        raise pytest.UsageError(f"--kc-patch / kernelcache_patch / KERNELCACHE_PATCH: {e}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    if state.patched:
        from kernelcache import patch

        patch.uninstall(state.patched)
    restore_env(state.saved_env)
    del config.stash[STATE]
