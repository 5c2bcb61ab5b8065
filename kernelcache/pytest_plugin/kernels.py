"""Kernels of a session: which exist (declared specs), warming, availability, loads in tests.

Why warming lives in the plugin: build time must never count against a test's timeout, and
under xdist N workers must not compile the same kernel N times. So declared kernels are built
before any test (in the controller, before workers exist); a test whose kernel failed errors at
setup naming the kernel and the reason, and other tests still run. Every load goes through the
loader with the session's :class:`~kernelcache.base.settings.Settings` passed explicitly; a marker's
``no_build`` is ``settings.replace(no_build=...)`` for that load only.
"""
from __future__ import annotations

import importlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import pytest

from kernelcache.base.events import Status
from kernelcache.base.settings import Settings

from . import names

ITEM_KERNELS = pytest.StashKey[list]()  # kernel names a collected test declares
ITEM_LOADED = pytest.StashKey[list]()  # kernel names a test's own loads named while it ran


class KernelUnavailable(Exception):
    """A test needs a kernel that failed to build, is unknown, or was not warmed."""


class Kernels:
    """The declared kernel specs, warm results and per-kernel use counts of one process."""

    def __init__(self, config: pytest.Config, settings: Settings, spec_refs: Sequence[str],
                 warm_mode: str, jobs: int | None, worker_id: str = ""):
        self.config = config
        self.settings = settings
        self.spec_refs = list(spec_refs)
        self.warm_mode = warm_mode
        self.jobs = jobs
        self.worker_id = worker_id
        self.results: dict[str, dict] = {}  # name -> WarmResult.as_dict() + "where"
        self.uses: dict[str, Counter] = {}  # name -> {"test": n, "<load status>": n}
        self.warm_seconds = 0.0
        self._extra: dict[str, Any] | None = None
        self._fi_done: set[str] = set()  # FlashInfer references warmed (results are by module name)

    # -- specs ---------------------------------------------------------------------------------
    def extra_specs(self) -> dict[str, Any]:
        """Specs named by ``kernelcache_specs`` / ``--kc-spec`` (``module:callable``)."""
        if self._extra is None:
            specs: dict[str, Any] = {}
            for ref in self.spec_refs:
                for s in _specs_of(ref, self.config):
                    specs[s.name] = s
            self._extra = specs
        return self._extra

    def known_names(self) -> set[str]:
        from kernelcache.kernels import shipped_kernel_names

        return set(self.extra_specs()) | set(shipped_kernel_names())

    def spec_for(self, name: str) -> Any:
        """The KernelSpec named ``name``; raises KernelUnavailable with the reason."""
        extra = self.extra_specs()
        if name in extra:
            return extra[name]
        from kernelcache.kernels import shipped_kernel_names, shipped_specs

        if name not in shipped_kernel_names():
            known = sorted(set(extra) | set(shipped_kernel_names()))
            raise KernelUnavailable(
                f"unknown kernel {name!r} (known: {', '.join(known)}; add specs with kernelcache_specs: a "
                "torch extension's is kernelcache.cpp_extension.make_spec(name, sources, ...), the spec of "
                "that load call; a FlashInfer module is named by its generator, MODULE:FUNC(ARGS), e.g. "
                "'flashinfer.jit.activation:gen_act_and_mul_module(\"silu\")')")
        try:
            return shipped_specs([name], self.settings)[name]
        except Exception as e:  # noqa: BLE001 - the kernel's own module may be broken
            raise KernelUnavailable(f"kernel {name!r}: its spec could not be loaded: "
                                    f"{type(e).__name__}: {e}") from e

    # -- warming -------------------------------------------------------------------------------
    def warm(self, wanted: Sequence[str], where: str, build_only: bool = False) -> None:
        """Build/load the kernels not warmed yet; results are kept, failures included."""
        todo = [n for n in dict.fromkeys(wanted) if n not in self.results and n not in self._fi_done]
        flashinfer = [n for n in todo if ":" in n]  # MODULE:FUNC(ARGS): kernel names have no ':'
        if flashinfer:
            self._warm_flashinfer(flashinfer, where)
            todo = [n for n in todo if ":" not in n]
        if not todo:
            return
        specs = []
        for n in todo:
            try:
                specs.append(self.spec_for(n))
            except KernelUnavailable as e:
                self.results[n] = _result(n, Status.FAILED, str(e), where)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and specs and not self.worker_id:
            tr.write_line(f"kernelcache: warming {len(specs)} kernel(s) in the {where}: "
                          f"{', '.join(s.name for s in specs)}")
        if not build_only:
            specs = [s for s in specs if not self._skip_unbuildable_cuda(s, where)]
        if not specs:
            return
        from kernelcache.lookup import loader

        try:  # import once up front, so the first kernel's seconds are not the tvm-ffi import
            import tvm_ffi  # noqa: F401
        except Exception:  # noqa: BLE001 - the loader reports it per kernel
            pass
        t0 = time.monotonic()
        for r in loader.warm(specs, jobs=self.jobs, settings=self.settings):
            d = r.as_dict()
            d["where"] = where
            if r.status == Status.FAILED and r.error is not None:
                d["error_type"] = type(r.error).__name__
            self.results[r.name] = d
        self.warm_seconds += time.monotonic() - t0

    def _warm_flashinfer(self, refs: list[str], where: str) -> None:
        """FlashInfer modules through the FlashInfer route (their arch: FlashInfer's own gencode
        set), as ``kernelcache build --flashinfer`` does: a test's routed call of the same module
        (``--kc-patch=flashinfer``) is then a hit, also under ``--kc-no-build``."""
        from kernelcache import flashinfer

        self._fi_done.update(refs)
        t0 = time.monotonic()
        for row in flashinfer.built(refs, self.settings):
            d = _result(row["name"], row["status"], row.get("reason", ""), where)
            d.update(seconds=round(float(row.get("seconds", 0.0)), 3), entry_path=row.get("entry_path", ""))
            self.results[row["name"]] = d
        self.warm_seconds += time.monotonic() - t0

    def _skip_unbuildable_cuda(self, spec: Any, where: str) -> bool:
        """No GPU and no target arch: a CUDA kernel is skipped (its tests skip), not failed.
        ``--kc-build-only`` asked for the build, so there it is attempted (and fails)."""
        if not spec.is_cuda:
            return False
        from kernelcache.base.errors import ToolchainError
        from kernelcache.host import gpu

        try:
            gpu.target_archs(self.settings.cuda_arch)
        except ToolchainError as e:
            self.results[spec.name] = _result(spec.name, Status.SKIPPED, f"not built here: {e}", where)
            return True
        return False

    # -- in tests ------------------------------------------------------------------------------
    def check_available(self, name: str) -> None:
        """Skip/raise when a test's kernel cannot be used here (before the test runs)."""
        r = self.results.get(name)
        if r is not None and r["status"] == Status.SKIPPED:
            pytest.skip(f"kernel {name!r} {r['reason']}")
        if r is not None and r["status"] == Status.FAILED:
            raise KernelUnavailable(f"kernel {name!r} is unavailable: {_brief(r['reason'])}")
        if r is None:
            self.spec_for(name)  # raises for unknown / broken specs
            if self.warm_mode == "controller":
                raise KernelUnavailable(
                    f"kernel {name!r} was not prebuilt (warm=controller): declare it in "
                    "kernelcache_kernels / --kc-kernels or name it in a literal kernel() marker")

    def load(self, name: str, no_build: bool | None = None) -> Any:
        """The loaded module of ``name`` (a cache hit when warmed); ``no_build`` from a marker
        overrides the session's setting for this load only."""
        self.check_available(name)
        spec = self.spec_for(name)
        from kernelcache.lookup import loader

        settings = self.settings if no_build is None else self.settings.replace(no_build=bool(no_build))
        try:
            mod, res = loader.load_with_result(spec, settings=settings)
        except Exception as e:  # noqa: BLE001 - surfaces as a setup error naming the kernel
            self.use(name, Status.FAILED)
            raise KernelUnavailable(f"kernel {name!r} could not be loaded: {type(e).__name__}: {e}") from e
        self.use(name, res.status)
        if name not in self.results:  # loaded lazily (warm off): report it like a warm
            self.results[name] = {**res.as_dict(), "where": self.worker_id or "test"}
        return mod

    def use(self, name: str, status: str) -> None:
        self.uses.setdefault(name, Counter())[str(status)] += 1  # plain words: they cross to the controller


FULL_OUTPUT_HINT = "full compiler output: kernelcache section of the summary"


def _brief(reason: str) -> str:
    """The first line of a failure, pointing at the one full copy (printed once per session by
    the report), so N tests that need a broken kernel do not repeat its compiler output N times."""
    lines = reason.strip().splitlines()
    if len(lines) <= 1:
        return reason.strip()
    return f"{lines[0]} ({FULL_OUTPUT_HINT})"


def _result(name: str, status: str, reason: str, where: str) -> dict:
    return {"name": name, "status": str(status), "seconds": 0.0, "reason": reason, "entry_id": "",
            "entry_path": "", "where": where}


def _specs_of(ref: str, config: pytest.Config) -> list[Any]:
    from kernelcache.base.errors import SpecError
    from kernelcache.base.spec import specs_of_value

    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise pytest.UsageError(f"kernelcache_specs entry {ref!r} must be 'module:callable'")
    obj = _import_attr(mod_name, attr, config)
    try:
        items = specs_of_value(obj, f"kernelcache_specs entry {ref!r}")
    except SpecError as e:
        raise pytest.UsageError(str(e)) from None
    return items


def _import_attr(mod_name: str, attr: str, config: pytest.Config) -> Any:
    """Import from sys.path, adding the rootdir and ini dir when the module is not found."""
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name != mod_name.split(".")[0] and e.name != mod_name:
            raise pytest.UsageError(f"kernelcache_specs: importing {mod_name!r} failed: {e}") from e
        extra = [str(config.rootpath)] + ([str(config.inipath.parent)] if config.inipath else [])
        for p in reversed(extra):
            if p not in sys.path:
                sys.path.insert(0, p)
        try:
            mod = importlib.import_module(mod_name)
        except Exception as e2:  # noqa: BLE001
            raise pytest.UsageError(f"kernelcache_specs: cannot import {mod_name!r}: {e2}") from e2
    except Exception as e:  # noqa: BLE001
        raise pytest.UsageError(f"kernelcache_specs: importing {mod_name!r} failed: "
                                f"{type(e).__name__}: {e}") from e
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise pytest.UsageError(f"kernelcache_specs: module {mod_name!r} has no attribute {attr!r}") from None


# -- what tests declare ----------------------------------------------------------------------------
def marker_kernels(item: pytest.Item) -> tuple[list[str], dict]:
    """Kernel names of every ``kernel`` marker on a test (closest first) and the closest kwargs."""
    found: list[str] = []
    kwargs: dict = {}
    for m in item.iter_markers("kernel"):
        for a in m.args:
            if not isinstance(a, str):
                raise pytest.UsageError(f"{item.nodeid}: kernel() marker takes kernel names (str), got {a!r}")
            if a not in found:
                found.append(a)
        for k, v in m.kwargs.items():
            kwargs.setdefault(k, v)  # closest marker wins
    return found, kwargs


def static_kernel_names(config: pytest.Config, gpus: bool = True) -> list[str]:
    """Kernel names in literal ``kernel(...)`` markers of the test files this run selects
    (the xdist controller never collects, so it reads the files).

    ``gpus=False`` (no GPU here): a kernel whose every marker sits beside ``gpu`` (or ``skip``)
    is left out: every test that could use it will skip, so building it would be paid for
    nothing (a CUDA kernel: minutes of nvcc). ``--kc-build-only``, ``--kc-kernels`` or a test
    without the ``gpu`` marker still ask for it."""
    patterns = tuple(config.getini("python_files") or names.DEFAULT_FILE_PATTERNS)
    paths = []
    for a in config.args:
        p = Path(str(a).split("::", 1)[0])
        paths.append(p if p.is_absolute() else config.invocation_params.dir / p)
    explicit = {os.path.realpath(p) for p in paths if p.is_file()}
    out: list[str] = []
    for f in names.iter_py_files(paths):
        if not (names.is_test_file(f, patterns) or os.path.realpath(f) in explicit):
            continue
        for n, gated in names.kernel_marker_sites(f).items():
            if n not in out and (gpus or not gated):
                out.append(n)
    return out


def will_skip(item: pytest.Item) -> bool:
    """Whether a collected test will skip at setup (``skip``, the gpu gate's skip, a true
    ``skipif``): its kernels need not be built. A ``skipif`` condition that cannot be evaluated
    counts as "runs" (its error is reported when the test runs)."""
    if any(m.name == "skip" for m in item.iter_markers()):
        return True
    if item.get_closest_marker("skipif") is None:
        return False
    from _pytest.skipping import evaluate_skip_marks  # the evaluation pytest itself runs at setup

    try:
        return evaluate_skip_marks(item) is not None
    except (Exception, pytest.fail.Exception):  # noqa: BLE001
        return False
