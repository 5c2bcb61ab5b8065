"""The active plugin of one pytest process: its (thin) session hooks (its state: :mod:`.state`).

Why a registered object instead of module-level hooks: the plugin is installed everywhere but
active only when asked for; the module-level hooks (:mod:`.hooks`) register this object in
``pytest_configure`` only then, so an inactive install runs none of these hooks. Each hook
only sequences calls into the modules that do one job each (gating, kernels, outcomes, report,
xdist).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import pytest

from kernelcache.base.events import Status

from . import gating, outcomes, placement, report, xdist
from .kernels import ITEM_KERNELS, ITEM_LOADED, KernelUnavailable, marker_kernels, static_kernel_names, will_skip
from .options import PLUGIN_NAME
from .state import SessionState


class SessionPlugin:
    """Hooks and fixtures of an active plugin."""

    def __init__(self, state: SessionState):
        self.st = state
        # --kc-build-only's exit status and closing line, once its kernels are built
        self._build_only_end: tuple[pytest.ExitCode, str] | None = None

    # -- session start: declare, warm ----------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        st = self.st
        if st.is_worker:
            return
        kernels = st.kernels
        build_only = bool(st.opt("build_only"))
        declared = list(st.opt("kernels"))
        if st.opt("warm") != "off" or build_only:
            known = kernels.known_names()  # without a GPU, kernels only gpu tests use are not built
            gpus = build_only or bool(st.hw.get("gpus"))
            declared += [n for n in static_kernel_names(session.config, gpus) if n in known]
        if build_only:  # seeding a cache: every kernel the project defines
            declared += list(kernels.extra_specs())
        st.declared = list(dict.fromkeys(declared))
        if build_only:
            self._build_only(session)
        if st.opt("warm") != "off" and not session.config.option.collectonly:
            kernels.warm(st.declared, "controller")

    def _build_only(self, session: pytest.Session) -> None:
        """Fill the cache; the session then ends without collecting or running a test, through
        pytest's ordinary finish (report, summary, our own last line), not ``pytest.exit``, whose
        ``_pytest.outcomes.Exit`` banner users read as a crash."""
        st = self.st
        if not st.declared:
            raise pytest.UsageError(
                "kernelcache: --kc-build-only: no kernels declared (use --kc-kernels, "
                "kernelcache_kernels, kernelcache_specs or kernel markers)")
        st.kernels.warm(st.declared, "controller", build_only=True)
        results = st.kernels.results.values()
        failed = sum(r["status"] == Status.FAILED for r in results)
        counts = Counter(r["status"] for r in results)
        self._build_only_end = (
            pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK,
            f"kernelcache --kc-build-only: {len(results) - failed} of {len(results)} kernel(s) ready ("
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")

    def pytest_plugin_registered(self, plugin: object, plugin_name: str, manager: Any) -> None:
        """``--kc-build-only`` under ``-n N``: the controller builds and no xdist worker starts
        (xdist's session would spawn them, each collecting every test file, for nothing)."""
        if plugin_name == "dsession" and self.st.opt("build_only") and not self.st.is_worker:
            manager.unregister(plugin)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool | None:
        return True if self._build_only_end else None  # build-only: no test is collected

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        return True if self._build_only_end else None

    # -- collection: gates, late warming -------------------------------------------------------
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        placement.deselect(config, items)  # tests placed on another CI runner (--kc-placed)
        gating.gate(items, self.st.hw, bool(self.st.opt("require_gpu")))
        for item in items:
            found, _ = marker_kernels(item)
            if found:
                item.stash[ITEM_KERNELS] = found

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        st = self.st
        if st.opt("warm") != "auto" or session.config.option.collectonly:
            return
        needed: list[str] = []
        for item in session.items:
            for n in item.stash.get(ITEM_KERNELS, []):
                if n not in st.kernels.results and n not in needed and not will_skip(item) \
                        and not item.stash.get(gating.ITEM_GPU, None):  # fails at setup (--kc-require-gpu)
                    needed.append(n)
        if needed:
            st.kernels.warm(needed, st.worker_id or "collection")

    # -- per test ------------------------------------------------------------------------------
    # Not tryfirst: skip/skipif markers (the gpu gate included) are evaluated first, so a skipped
    # test never errors because of a kernel it would have needed.
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        gating.fail_if_required(item)
        msg = None
        try:
            for name in item.stash.get(ITEM_KERNELS, []):
                self.st.kernels.check_available(name)
                self.st.kernels.use(name, "test")  # a test that declared the kernel and runs with it
        except KernelUnavailable as e:
            msg = f"kernelcache: {e}"
        if msg:
            pytest.fail(msg, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        """The kernels a test loads itself (``kc.load`` in its body, a drop-in call), besides the
        ones its markers name: each load's event names it, however it was answered."""
        from kernelcache.base import events
        from kernelcache.impact.record import LOAD_EVENTS

        loaded: list[str] = []
        item.stash[ITEM_LOADED] = loaded

        def on_event(event: str, fields: dict) -> None:
            if event in LOAD_EVENTS and fields.get("name"):
                loaded.append(str(fields["name"]))

        events.add_listener(on_event)
        try:
            return (yield)
        finally:
            events.remove_listener(on_event)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        rep = yield
        found = list(dict.fromkeys([*item.stash.get(ITEM_KERNELS, []), *item.stash.get(ITEM_LOADED, [])]))
        if found:
            rep.kernelcache_kernels = found
        if item.get_closest_marker("gpu") is not None:
            rep.kernelcache_gpu = True
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.st.is_worker:
            outcomes.record(self.st.tests, report)

    # -- fixtures ------------------------------------------------------------------------------
    @pytest.fixture
    def kernelcache_module(self, request: pytest.FixtureRequest) -> Callable[[str], Any]:
        """``kernelcache_module(name)`` -> the loaded tvm_ffi.Module of a kernel (a cache hit when warmed)."""
        node = request.node
        _, kwargs = marker_kernels(node) if isinstance(node, pytest.Item) else ([], {})
        return lambda name: self._load(name, kwargs)

    @pytest.fixture
    def kc_kernel(self, request: pytest.FixtureRequest) -> Any:
        """The loaded module of the first kernel named by the test's closest ``kernel`` marker."""
        found, kwargs = marker_kernels(request.node)
        if not found:
            pytest.fail("kernelcache: the kc_kernel fixture needs a @pytest.mark.kernel('name') marker",
                        pytrace=False)
        return self._load(found[0], kwargs)

    def _load(self, name: str, marker_kwargs: dict) -> Any:
        try:
            return self.st.kernels.load(name, no_build=marker_kwargs.get("no_build"))
        except KernelUnavailable as e:
            msg = f"kernelcache: {e}"
        pytest.fail(msg, pytrace=False)

    # -- finish and report ---------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        st = self.st
        if st.is_worker:
            session.config.workeroutput[PLUGIN_NAME] = xdist.worker_output(st)  # type: ignore[attr-defined]
            return
        if self._build_only_end:  # every kernel asked for counts: 1 when one failed, else 0
            session.exitstatus = self._build_only_end[0]
            report.write_json(st, session, int(session.exitstatus))
            report.write_step_summary(st)
            return
        # A failed kernel fails the session when it was declared, or a test that ran needed it
        # (a CUDA kernel that only skipped GPU tests name does not fail a CPU run).
        needed = outcomes.needed_kernels(st.tests)
        for r in st.kernels.results.values():
            if r["status"] == Status.FAILED and (r["name"] in st.opt("kernels") or r["name"] in needed):
                st.policy_failures.append(f"kernel {r['name']!r} failed: {report.first_line(r['reason'])}")
        if st.opt("require_gpu"):
            st.policy_failures += gating.require_gpu_failures(st.hw, st.tests.values())
        if st.policy_failures and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        report.write_json(st, session, int(session.exitstatus))
        report.write_step_summary(st)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return report.header_lines(self.st)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not self.st.is_worker:
            report.write_terminal(terminalreporter, self.st)
        if self._build_only_end:
            terminalreporter.write_line(self._build_only_end[1], bold=True,
                                        **({"red": True} if self._build_only_end[0] else {"green": True}))
