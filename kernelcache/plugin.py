"""The pytest plugin: ``pytest -p kernelcache``.

Installed, the plugin is autoloaded through its ``pytest11`` entry point, but unless it is
asked for (``-p kernelcache`` on the command line, in ``addopts`` or ``PYTEST_ADDOPTS``;
``kernelcache_enable = true``; ``KERNELCACHE_PLUGIN=1``) it only registers its markers and
options and does nothing else.

Asked for, it:

* resolves its options (ini < ``KERNELCACHE_*`` environment < command line < marker) and
  applies them by setting the ``KERNELCACHE_*`` variables the loader reads (restored at exit);
* detects GPUs once (``nvidia-smi`` with a time limit; no CUDA context), in the controller;
* warms the declared kernels once per session, in the controller before any xdist worker
  exists (``pytest_sessionstart``); workers get the results and the GPU facts through
  ``workerinput`` and send their load counters back through ``workeroutput``;
* gates tests: ``gpu`` markers skip with the specific reason (or fail under
  ``--kc-require-gpu``), ``kernel`` markers error naming the kernel when it failed to build;
* reports: a header, a per-kernel summary table, and ``--kc-report-json`` with per-test outcomes;
* resolves ``--kc-run NAME...`` to test files before collection (see :mod:`kernelcache.selection`).

This is the only module of the package that imports pytest. It imports neither tvm_ffi nor
torch at import time.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from . import selection

PLUGIN_NAME = "kernelcache"
REPORT_FORMAT = 1

# -- options -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Opt:
    dest: str
    cli: str
    ini: str
    env: str
    kind: str  # "str" | "path" | "bool" | "int" | "list" | "choice"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    loader_env: bool = False  # the loader reads ``env`` itself; the plugin writes the resolved value


OPTIONS: tuple[_Opt, ...] = (
    _Opt("cache_dir", "--kc-cache-dir", "kernelcache_dir", "KERNELCACHE_DIR", "path", None,
         "cache root (default: the loader's, ~/.cache/kernelcache)", loader_env=True),
    _Opt("lock_dir", "--kc-lock-dir", "kernelcache_lock_dir", "KERNELCACHE_LOCK_DIR", "path", None,
         "node-local directory for build locks (default: the loader's, under the temp dir)", loader_env=True),
    _Opt("prebuild", "--kc-prebuild", "kernelcache_prebuild", "KERNELCACHE_PREBUILD", "choice", "auto",
         "auto: warm declared kernels in the controller, then kernels found only at collection in "
         "the collecting process; controller: only the controller builds (an undeclared kernel is "
         "an error); off: load lazily inside tests", choices=("auto", "controller", "off")),
    _Opt("no_build", "--kc-no-build", "kernelcache_no_build", "KERNELCACHE_NO_BUILD", "bool", False,
         "a cache miss is an error naming the kernel and the reason (runners that must hit)", loader_env=True),
    _Opt("rebuild", "--kc-rebuild", "kernelcache_rebuild", "KERNELCACHE_REBUILD", "bool", False,
         "ignore cached entries and rebuild every warmed kernel once", loader_env=True),
    _Opt("cuda_arch", "--kc-arch", "kernelcache_cuda_arch", "KERNELCACHE_CUDA_ARCH", "str", None,
         "CUDA target arch(s), e.g. 9.0 or '8.0,9.0' (default: TVM_FFI_CUDA_ARCH_LIST, else the "
         "detected GPUs)", loader_env=True),
    _Opt("build_only", "--kc-build-only", "kernelcache_build_only", "KERNELCACHE_BUILD_ONLY", "bool", False,
         "build every declared kernel (CUDA included, no GPU needed), print the summary and exit"),
    _Opt("report_json", "--kc-report-json", "kernelcache_report_json", "KERNELCACHE_REPORT_JSON", "path", None,
         "write a JSON report (session, kernels, counters, per-test outcomes) to this path"),
    _Opt("require_gpu", "--kc-require-gpu", "kernelcache_require_gpu", "KERNELCACHE_REQUIRE_GPU", "bool", False,
         "GPU tests that cannot run fail instead of skipping, and the run fails when no GPU is "
         "detected or every gpu-marked test was skipped"),
    _Opt("kernels", "--kc-kernels", "kernelcache_kernels", "KERNELCACHE_KERNELS", "list", (),
         "kernel names to warm (shipped kernels or ones from kernelcache_specs); comma/space separated"),
    _Opt("specs", "--kc-spec", "kernelcache_specs", "KERNELCACHE_SPECS", "list", (),
         "module:callable returning extra KernelSpec(s) (a spec, a list, or a dict) that markers and "
         "kernelcache_kernels can name; --kc-build-only builds all of them"),
    _Opt("jobs", "--kc-jobs", "kernelcache_jobs", "KERNELCACHE_JOBS", "int", None,
         "kernels built in parallel while warming (default: the loader's)"),
    _Opt("hardware", "--kc-hardware", "kernelcache_hardware", "KERNELCACHE_HARDWARE", "str", "auto",
         "auto (detect with nvidia-smi), or a stand-in: cpu, 2x9.0, '8.0,9.0'"),
)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(PLUGIN_NAME, "kernelcache: warm JIT kernels once, report, rerun by name "
                            "(active with -p kernelcache)")
    for o in OPTIONS:
        kw: dict[str, Any] = {"dest": f"kc_{o.dest}", "default": None,
                              "help": f"{o.help} [ini {o.ini}, env {o.env}]"}
        if o.kind == "bool":
            kw["action"] = "store_true"
        elif o.kind == "list":
            kw["action"] = "append"
            kw["metavar"] = "SPEC" if o.dest == "specs" else "NAMES"
        elif o.kind == "choice":
            kw["choices"] = list(o.choices)
        elif o.kind == "int":
            kw["type"] = int
        else:
            kw["metavar"] = "PATH" if o.kind == "path" else "VALUE"
        group.addoption(o.cli, **kw)
        if o.kind == "bool":
            parser.addini(o.ini, o.help, type="bool", default=False)
        elif o.kind == "list":
            parser.addini(o.ini, o.help, type="linelist", default=[])
        else:
            parser.addini(o.ini, o.help, type="string", default="")
    group.addoption(
        "--kc-run", dest="kc_run", action="extend", nargs="+", default=None, metavar="NAME",
        help="run these tests, given by file name (test_x.py), path suffix (dir/test_x.py) or "
             "node id (test_x.py::TestX::test_y); each must match exactly one file",
    )
    group.addoption(
        "--kc-failed-from", dest="kc_failed_from", default=None, metavar="REPORT",
        help="rerun the tests that failed or errored in a previous --kc-report-json REPORT "
             "(e.g. a CI artifact); a usage error if it records none",
    )
    parser.addini("kernelcache_enable", "activate the kernelcache plugin without -p kernelcache",
                  type="bool", default=False)
    parser.addini("kernelcache_test_roots", "directories --kc-run searches (default: testpaths, else rootdir)",
                  type="paths", default=[])


# -- activation ----------------------------------------------------------------------------------
def _p_args(tokens: list[str]) -> list[str]:
    out = []
    for i, t in enumerate(tokens):
        if t == "-p" and i + 1 < len(tokens):
            out.append(tokens[i + 1])
        elif t.startswith("-p") and len(t) > 2 and not t.startswith("--"):
            out.append(t[2:].lstrip("="))
        elif t.startswith("--plugin="):
            out.append(t.split("=", 1)[1])
    return out


def _asked_for(config: pytest.Config) -> bool:
    """Was the plugin asked for (as opposed to merely installed and autoloaded)?"""
    names = {PLUGIN_NAME, f"{PLUGIN_NAME}.plugin"}
    if getattr(config, "workerinput", {}).get(PLUGIN_NAME):
        return True
    ns = getattr(config, "known_args_namespace", None) or config.option
    plugins = list(getattr(config.option, "plugins", None) or []) + list(getattr(ns, "plugins", None) or [])
    if names & {p.strip() for p in plugins}:
        return True
    import shlex

    tokens = [str(a) for a in (config.invocation_params.args or ())]
    try:
        tokens += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        pass
    if names & set(_p_args(tokens)):
        return True
    if names & {p.strip() for p in os.environ.get("PYTEST_PLUGINS", "").split(",")}:
        return True
    if os.environ.get("KERNELCACHE_PLUGIN", "").strip().lower() in _TRUE:
        return True
    try:
        return bool(config.getini("kernelcache_enable"))
    except (ValueError, KeyError):
        return False


def _kc_cli_options(config: pytest.Config) -> list[str]:
    return sorted({str(a).split("=", 1)[0] for a in (config.invocation_params.args or ())
                   if str(a).startswith("--kc-")})


# -- option resolution ---------------------------------------------------------------------------
def _split_list(values: Any) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out += [t for t in str(v).replace(",", " ").split() if t]
    return out


def _convert(o: _Opt, raw: Any, where: str) -> Any:
    if o.kind == "bool":
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise pytest.UsageError(f"kernelcache: {where} must be a boolean (1/0, true/false), got {raw!r}")
    if o.kind == "int":
        try:
            v = int(str(raw).strip())
        except ValueError:
            raise pytest.UsageError(f"kernelcache: {where} must be an integer, got {raw!r}") from None
        if v < 1:
            raise pytest.UsageError(f"kernelcache: {where} must be >= 1, got {v}")
        return v
    if o.kind == "choice":
        s = str(raw).strip().lower()
        if s not in o.choices:
            raise pytest.UsageError(f"kernelcache: {where} must be one of {'/'.join(o.choices)}, got {raw!r}")
        return s
    s = str(raw).strip()
    return s or None


def resolve_options(config: pytest.Config, environ: dict | None = None) -> dict[str, tuple[Any, str]]:
    """dest -> (value, source) with source in default/ini/env/cli. Lists accumulate."""
    env = os.environ if environ is None else environ
    out: dict[str, tuple[Any, str]] = {}
    for o in OPTIONS:
        cli = getattr(config.option, f"kc_{o.dest}", None)
        if o.kind == "list":
            vals: list[str] = []
            srcs = []
            ini = _split_list(config.getini(o.ini))
            if ini:
                vals += ini
                srcs.append("ini")
            if env.get(o.env, "").strip():
                vals += _split_list([env[o.env]])
                srcs.append("env")
            if cli:
                vals += _split_list(cli)
                srcs.append("cli")
            out[o.dest] = (list(dict.fromkeys(vals)), "+".join(srcs) or "default")
            continue
        value, source = o.default, "default"
        ini_raw = config.getini(o.ini)
        if o.kind == "bool":
            if ini_raw:
                value, source = True, "ini"
        elif str(ini_raw).strip():
            value, source = _convert(o, ini_raw, f"ini {o.ini}"), "ini"
        if o.env in env and (o.kind == "bool" or env[o.env].strip()):
            value, source = _convert(o, env[o.env], f"env {o.env}"), "env"
        if cli not in (None, False):
            value, source = _convert(o, cli, o.cli), "cli"
        if o.kind == "path" and value and source == "ini" and config.inipath is not None:
            value = str((config.inipath.parent / os.path.expanduser(value)).resolve())
        elif o.kind == "path" and value:
            value = os.path.abspath(os.path.expanduser(value))
        out[o.dest] = (value, source)
    return out


# -- stash keys ----------------------------------------------------------------------------------
STATE = pytest.StashKey["_State"]()
ITEM_GPU = pytest.StashKey[str]()  # reason a gpu test cannot run here
ITEM_KERNELS = pytest.StashKey[list]()


class KernelUnavailable(Exception):
    """A test needs a kernel that failed to build / could not be resolved."""


# -- the active plugin ---------------------------------------------------------------------------
_SEVERITY = {"failed": 4, "built": 3, "hit": 2, "prebuilt": 1, "skipped": 0}


class _State:
    """Per-config state of an active plugin (controller, worker or plain process)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.worker_id = config.workerinput.get("workerid", "") if self.is_worker else ""
        self.opts = resolve_options(config)
        self.saved_env: dict[str, str | None] = {}
        self.extra_specs: dict[str, Any] | None = None
        self.hw: dict = {}
        self.declared: list[str] = []  # kernels to warm in the controller
        self.results: dict[str, dict] = {}  # name -> warm result (+ "where")
        self.uses: dict[str, Counter] = {}  # name -> Counter: "test" (declared by a running test), load statuses
        self.worker_out: dict[str, dict] = {}  # worker id -> its workeroutput["kernelcache"]
        self.tests: dict[str, dict] = {}
        self.policy_failures: list[str] = []
        self.warm_seconds = 0.0
        self.import_seconds = 0.0
        self.t0 = time.time()

    def opt(self, dest: str) -> Any:
        return self.opts[dest][0]

    # environment -----------------------------------------------------------------------------
    def set_env(self, name: str, value: str) -> None:
        if name not in self.saved_env:
            self.saved_env[name] = os.environ.get(name)
        os.environ[name] = value

    def apply_env(self) -> None:
        """Write resolved loader settings into the environment (workers and the loader read it)."""
        for o in OPTIONS:
            value, source = self.opts[o.dest]
            if source in ("default", "env"):
                continue
            if o.kind == "bool":
                self.set_env(o.env, "1" if value else "0")
            elif o.kind == "list":
                self.set_env(o.env, " ".join(value))
            elif value is not None:
                self.set_env(o.env, str(value))

    def restore_env(self) -> None:
        for name, old in self.saved_env.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        self.saved_env.clear()

    # specs -----------------------------------------------------------------------------------
    def load_extra_specs(self) -> dict[str, Any]:
        if self.extra_specs is not None:
            return self.extra_specs
        from .spec import KernelSpec

        specs: dict[str, Any] = {}
        for ref in self.opt("specs"):
            mod_name, sep, attr = ref.partition(":")
            if not sep or not mod_name or not attr:
                raise pytest.UsageError(f"kernelcache_specs entry {ref!r} must be 'module:callable'")
            obj = _import_attr(mod_name, attr, self.config)
            value = obj() if callable(obj) and not isinstance(obj, KernelSpec) else obj
            if isinstance(value, KernelSpec):
                items = [value]
            elif isinstance(value, dict):
                items = list(value.values())
            else:
                try:
                    items = list(value)
                except TypeError:
                    items = [value]
            for s in items:
                if not isinstance(s, KernelSpec):
                    raise pytest.UsageError(f"kernelcache_specs entry {ref!r} returned {type(s).__name__}, "
                                            "expected KernelSpec(s)")
                specs[s.name] = s
        self.extra_specs = specs
        return specs

    def spec_for(self, name: str) -> Any:
        """The KernelSpec named ``name``; raises KernelUnavailable with the reason."""
        extra = self.load_extra_specs()
        if name in extra:
            return extra[name]
        from .kernels import shipped_kernel_names, shipped_specs

        if name not in shipped_kernel_names():
            known = sorted(set(extra) | set(shipped_kernel_names()))
            raise KernelUnavailable(f"unknown kernel {name!r} (known: {', '.join(known)}; add specs "
                                    "with kernelcache_specs)")
        try:
            return shipped_specs([name])[name]
        except Exception as e:  # noqa: BLE001 - the kernel's own module may be broken
            raise KernelUnavailable(f"kernel {name!r}: its spec could not be loaded: "
                                    f"{type(e).__name__}: {e}") from e

    def known_names(self) -> set[str]:
        from .kernels import shipped_kernel_names

        return set(self.load_extra_specs()) | set(shipped_kernel_names())

    # warming ---------------------------------------------------------------------------------
    def warm(self, names: list[str], where: str) -> None:
        names = [n for n in dict.fromkeys(names) if n not in self.results]
        if not names:
            return
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        specs = []
        for n in names:
            try:
                specs.append(self.spec_for(n))
            except KernelUnavailable as e:
                self.results[n] = {"name": n, "status": "failed", "seconds": 0.0, "reason": str(e),
                                   "entry_id": "", "entry_path": "", "where": where}
        if tr is not None and specs and not self.is_worker:
            tr.write_line(f"kernelcache: warming {len(specs)} kernel(s) in the {where}: "
                          f"{', '.join(s.name for s in specs)}")
        if not self.opt("build_only"):
            specs = [s for s in specs if not self._skip_unbuildable_cuda(s, where)]
        if not specs:
            return
        from . import loader

        t0 = time.monotonic()
        try:  # import once up front so the first kernel's time is not the tvm-ffi import
            import tvm_ffi  # noqa: F401
        except Exception:  # noqa: BLE001 - the loader reports it per kernel
            pass
        self.import_seconds += time.monotonic() - t0
        t0 = time.monotonic()
        for r in loader.warm(specs, jobs=self.opt("jobs")):
            d = r.as_dict()
            d["where"] = where
            if r.status == "failed" and r.error is not None:
                d["error_type"] = type(r.error).__name__
            self.results[r.name] = d
        self.warm_seconds += time.monotonic() - t0

    def _skip_unbuildable_cuda(self, spec: Any, where: str) -> bool:
        """No GPU and no target arch: a CUDA kernel is skipped (its tests skip), not failed.

        --kc-build-only still builds it (and fails without an arch): that run asked for it.
        """
        if not spec.is_cuda:
            return False
        from . import toolchain
        from .errors import ToolchainError

        try:
            toolchain.cuda_archs()
        except ToolchainError as e:
            self.results[spec.name] = {"name": spec.name, "status": "skipped", "seconds": 0.0,
                                       "reason": f"not built here: {e}", "entry_id": "",
                                       "entry_path": "", "where": where}
            return True
        return False

    def use(self, name: str, status: str) -> None:
        self.uses.setdefault(name, Counter())[status] += 1


def _import_attr(mod_name: str, attr: str, config: pytest.Config) -> Any:
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


def _marker_kernels(item: pytest.Item) -> tuple[list[str], dict]:
    names: list[str] = []
    kwargs: dict = {}
    for m in item.iter_markers("kernel"):
        for a in m.args:
            if not isinstance(a, str):
                raise pytest.UsageError(f"{item.nodeid}: kernel() marker takes kernel names (str), got {a!r}")
            if a not in names:
                names.append(a)
        for k, v in m.kwargs.items():
            kwargs.setdefault(k, v)  # closest marker wins
    return names, kwargs


def _static_kernel_names(config: pytest.Config) -> list[str]:
    """Kernel names in literal ``kernel(...)`` markers of the test files this run selects."""
    patterns = tuple(config.getini("python_files") or selection.DEFAULT_FILE_PATTERNS)
    paths = []
    for a in config.args:
        p = Path(str(a).split("::", 1)[0])
        p = p if p.is_absolute() else config.invocation_params.dir / p
        paths.append(p)
    explicit = {os.path.realpath(p) for p in paths if p.is_file()}
    names: list[str] = []
    for f in selection.iter_py_files(paths):
        if not (selection.is_test_file(f, patterns) or os.path.realpath(f) in explicit):
            continue
        for n in selection.kernel_marker_names(f):
            if n not in names:
                names.append(n)
    return names


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0], "pytest": pytest.__version__}
    for dist, key in (("kernelcache", "kernelcache"), ("apache-tvm-ffi", "tvm_ffi"), ("pytest-xdist", "xdist")):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = None
    return out


def _arch_text() -> str:
    for var in ("KERNELCACHE_CUDA_ARCH", "TVM_FFI_CUDA_ARCH_LIST"):
        v = os.environ.get(var, "").strip()
        if v:
            return f"{v} ({var})"
    return "unset (CUDA kernels need --kc-arch or a GPU)"


def _gpu_text(hw: dict) -> str:
    gpus = hw.get("gpus", [])
    if not gpus:
        return f"none ({hw.get('note') or 'no GPU detected'})"
    names = Counter(f"{g['name']} (arch {g['arch']})" for g in gpus)
    return ", ".join(f"{n}x {k}" for k, n in names.items()) + (
        f" [{hw.get('note')}]" if hw.get("source") == "override" else "")


class KernelCachePlugin:
    """Hooks and fixtures of an active plugin (registered in pytest_configure when asked for)."""

    def __init__(self, state: _State):
        self.st = state

    # session start: detect, declare, warm ------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        st = self.st
        if st.is_worker:
            return
        try:
            hw = selection.parse_hardware(st.opt("hardware") or "auto")
        except ValueError as e:
            raise pytest.UsageError(f"kernelcache: --kc-hardware / KERNELCACHE_HARDWARE: {e}") from None
        if hw is None:
            try:
                timeout = float(os.environ.get("KERNELCACHE_GPU_PROBE_TIMEOUT", "") or 10.0)
            except ValueError:
                raise pytest.UsageError("KERNELCACHE_GPU_PROBE_TIMEOUT must be a number of seconds") from None
            hw = selection.detect_gpus(timeout=timeout)
        st.hw = hw
        if (not os.environ.get("KERNELCACHE_CUDA_ARCH", "").strip()
                and not os.environ.get("TVM_FFI_CUDA_ARCH_LIST", "").strip() and st.hw["gpus"]
                and st.hw.get("source") != "override"):
            archs = sorted({g["arch"] for g in st.hw["gpus"]})
            st.set_env("KERNELCACHE_CUDA_ARCH", ",".join(archs))  # one detection for every worker
        prebuild = st.opt("prebuild")
        declared = list(st.opt("kernels"))
        if prebuild != "off" or st.opt("build_only"):
            known = st.known_names()
            declared += [n for n in _static_kernel_names(session.config) if n in known]
        if st.opt("build_only"):  # seeding a cache: every kernel the project defines
            declared += list(st.load_extra_specs())
        st.declared = list(dict.fromkeys(declared))
        if st.opt("build_only"):
            if not st.declared:
                raise pytest.UsageError(
                    "kernelcache: --kc-build-only: no kernels declared (use --kc-kernels, "
                    "kernelcache_kernels, kernelcache_specs or kernel markers)")
            st.warm(st.declared, "controller")
            ok = [r for r in st.results.values() if r["status"] != "failed"]
            failed = [r for r in st.results.values() if r["status"] == "failed"]
            self._write_report(session, exitstatus=1 if failed else 0)
            counts = Counter(r["status"] for r in st.results.values())
            msg = (f"kernelcache --kc-build-only: {len(ok)} of {len(st.results)} kernel(s) ready ("
                   + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                self._summary_table(tr)
            pytest.exit(msg, returncode=1 if failed else 0)
        if prebuild != "off" and not session.config.option.collectonly:
            st.warm(st.declared, "controller")

    # collection: gates and late warming ------------------------------------------------------
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        st = self.st
        for item in items:
            m = item.get_closest_marker("gpu")
            if m is not None:
                count = m.kwargs.get("count", m.args[0] if m.args else 1)
                min_arch = m.kwargs.get("min_arch", m.args[1] if len(m.args) > 1 else None)
                try:
                    problem = selection.gpu_requirement_problem(st.hw, int(count), min_arch)
                except ValueError as e:
                    raise pytest.UsageError(f"{item.nodeid}: bad gpu() marker: {e}") from None
                if problem:
                    if st.opt("require_gpu"):
                        item.stash[ITEM_GPU] = problem
                    else:
                        item.add_marker(pytest.mark.skip(reason=f"gpu: {problem}"))
            names, _ = _marker_kernels(item)
            if names:
                item.stash[ITEM_KERNELS] = names

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        st = self.st
        if st.opt("prebuild") != "auto" or session.config.option.collectonly:
            return
        needed: list[str] = []
        for item in session.items:
            for n in item.stash.get(ITEM_KERNELS, []):
                if n not in st.results and n not in needed and not _is_skipped(item):
                    needed.append(n)
        if needed:
            st.warm(needed, st.worker_id or "collection")

    # per-test --------------------------------------------------------------------------------
    # Not tryfirst: skip/skipif markers (the gpu gate included) are evaluated first, so a skipped
    # test never errors because of a kernel it would have needed.
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        problem = item.stash.get(ITEM_GPU, None)
        if problem:
            pytest.fail(f"kernelcache --kc-require-gpu: gpu: {problem}", pytrace=False)
        msg = None
        try:
            for name in item.stash.get(ITEM_KERNELS, []):
                self._check_available(name)
                self.st.use(name, "test")  # a test that declared the kernel and runs with it
        except KernelUnavailable as e:
            msg = f"kernelcache: {e}"
        if msg:
            pytest.fail(msg, pytrace=False)

    def _check_available(self, name: str) -> None:
        st = self.st
        r = st.results.get(name)
        if r is not None and r["status"] == "skipped":
            pytest.skip(f"kernel {name!r} {r['reason']}")
        if r is not None and r["status"] == "failed":
            raise KernelUnavailable(f"kernel {name!r} is unavailable: {r['reason']}")
        if r is None:
            st.spec_for(name)  # raises for unknown / broken specs
            if st.opt("prebuild") == "controller":
                raise KernelUnavailable(
                    f"kernel {name!r} was not prebuilt (prebuild=controller): declare it in "
                    "kernelcache_kernels / --kc-kernels or name it in a literal kernel() marker")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        rep = yield
        names = item.stash.get(ITEM_KERNELS, None)
        if names:
            rep.kernelcache_kernels = list(names)
        if item.get_closest_marker("gpu") is not None:
            rep.kernelcache_gpu = True
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.st.is_worker:
            return
        t = self.st.tests.setdefault(report.nodeid, {
            "nodeid": report.nodeid, "outcome": None, "duration": 0.0, "phases": {}, "attempts": 0,
            "kernels": [], "gpu": False, "worker": None})
        t["duration"] = round(t["duration"] + float(report.duration or 0.0), 6)
        phase = _phase_outcome(report)
        t["phases"][report.when] = phase
        if report.when == "call":
            t["attempts"] += 1
        t["kernels"] = list(getattr(report, "kernelcache_kernels", None) or t["kernels"])
        t["gpu"] = t["gpu"] or bool(getattr(report, "kernelcache_gpu", False))
        node = getattr(report, "node", None)
        if node is not None:
            t["worker"] = getattr(getattr(node, "gateway", None), "id", None)
        t["outcome"] = _final_outcome(t["phases"])
        if phase in ("skipped",) and isinstance(report.longrepr, tuple):
            t["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif phase in ("failed", "error") and report.longrepr is not None:
            t["message"] = report.longreprtext[-2000:]
        elif phase in ("xfailed", "xpassed"):
            t["reason"] = getattr(report, "wasxfail", "")

    # fixtures --------------------------------------------------------------------------------
    @pytest.fixture
    def kernelcache_module(self, request: pytest.FixtureRequest) -> Callable[[str], Any]:
        """``kernelcache_module(name)`` -> the loaded tvm_ffi.Module of a kernel (a cache hit when warmed)."""
        node = request.node
        _, kwargs = _marker_kernels(node) if isinstance(node, pytest.Item) else ([], {})

        def get(name: str) -> Any:
            return self._load(name, kwargs)

        return get

    @pytest.fixture
    def kc_kernel(self, request: pytest.FixtureRequest) -> Any:
        """The loaded module of the first kernel named by the test's closest ``kernel`` marker."""
        names, kwargs = _marker_kernels(request.node)
        if not names:
            pytest.fail("kernelcache: the kc_kernel fixture needs a @pytest.mark.kernel('name') marker",
                        pytrace=False)
        return self._load(names[0], kwargs)

    def _load(self, name: str, marker_kwargs: dict) -> Any:
        try:
            return self._load_impl(name, marker_kwargs)
        except KernelUnavailable as e:
            msg = f"kernelcache: {e}"
        pytest.fail(msg, pytrace=False)

    def _load_impl(self, name: str, marker_kwargs: dict) -> Any:
        st = self.st
        self._check_available(name)
        spec = st.spec_for(name)
        from . import loader

        override = marker_kwargs.get("no_build")
        saved = os.environ.get("KERNELCACHE_NO_BUILD")
        if override is not None:  # marker beats ini/env/CLI for this test's lazy load
            os.environ["KERNELCACHE_NO_BUILD"] = "1" if override else "0"
        try:
            mod, res = loader.load_with_result(spec)
        except Exception as e:  # noqa: BLE001 - surfaces as a setup error naming the kernel
            st.use(name, "failed")
            raise KernelUnavailable(f"kernel {name!r} could not be loaded: {type(e).__name__}: {e}") from e
        finally:
            if override is not None:
                if saved is None:
                    os.environ.pop("KERNELCACHE_NO_BUILD", None)
                else:
                    os.environ["KERNELCACHE_NO_BUILD"] = saved
        st.use(name, res.status)
        if name not in st.results:  # loaded lazily (prebuild off): report it like a warm
            d = res.as_dict()
            d["where"] = st.worker_id or "test"
            st.results[name] = d
        return mod

    # finish ----------------------------------------------------------------------------------
    def _stats(self) -> dict:
        from . import events

        return events.stats()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        st = self.st
        if st.is_worker:
            session.config.workeroutput[PLUGIN_NAME] = {  # type: ignore[attr-defined]
                "stats": self._stats(),
                "results": {n: r for n, r in st.results.items() if r.get("where") == st.worker_id},
                "uses": {n: dict(c) for n, c in st.uses.items()},
            }
            return
        # A failed kernel fails the session when it was declared, or a test that ran needed it
        # (a CUDA kernel that only skipped GPU tests name does not fail a CPU run).
        needed = {n for t in st.tests.values() if t["outcome"] not in (None, "skipped") for n in t["kernels"]}
        for r in st.results.values():
            if r["status"] == "failed" and (r["name"] in st.opt("kernels") or r["name"] in needed):
                st.policy_failures.append(f"kernel {r['name']!r} failed: {_first_line(r['reason'])}")
        if st.opt("require_gpu"):
            gpu_tests = [t for t in st.tests.values() if t["gpu"]]
            if not st.hw.get("gpus"):
                st.policy_failures.append(f"--kc-require-gpu: no GPU detected ({st.hw.get('note')})")
            elif gpu_tests and all(t["outcome"] == "skipped" for t in gpu_tests):
                st.policy_failures.append(f"--kc-require-gpu: all {len(gpu_tests)} gpu-marked test(s) "
                                          "were skipped")
        if st.policy_failures and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._write_report(session, int(session.exitstatus))

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        st = self.st
        v = _versions()
        from . import config as kc_config

        opts = ", ".join(f"{d}={st.opt(d)}" for d in ("prebuild", "no_build", "rebuild") if st.opt(d) or d == "prebuild")
        lines = [
            f"kernelcache {v['kernelcache']}: cache {kc_config.cache_dir()}, arch {_arch_text()}, {opts}",
            f"kernelcache: GPUs: {_gpu_text(st.hw)}; tvm-ffi {v['tvm_ffi']}",
        ]
        if st.results:
            parts = [f"{r['name']} {r['status']} {r['seconds']:.1f}s" for r in st.results.values()]
            lines.append(f"kernelcache: warmed {len(st.results)} kernel(s) in {st.warm_seconds:.1f}s: "
                         + ", ".join(parts))
        elif st.declared:
            lines.append(f"kernelcache: declared kernels: {', '.join(st.declared)}")
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.st.is_worker:
            return
        self._summary_table(terminalreporter)

    # xdist merge -----------------------------------------------------------------------------
    def merge_worker(self, worker_id: str, out: dict) -> None:
        st = self.st
        st.worker_out[worker_id] = out
        for n, r in (out.get("results") or {}).items():
            cur = st.results.get(n)
            if cur is None or _SEVERITY.get(r["status"], 0) > _SEVERITY.get(cur["status"], 0):
                st.results[n] = r

    def worker_payload(self) -> dict:
        st = self.st
        return {"active": True, "results": st.results, "hw": st.hw, "declared": st.declared}

    # report ----------------------------------------------------------------------------------
    def _merged_uses(self) -> dict[str, Counter]:
        total: dict[str, Counter] = {n: Counter(c) for n, c in self.st.uses.items()}
        for out in self.st.worker_out.values():
            for n, c in (out.get("uses") or {}).items():
                total.setdefault(n, Counter()).update(c)
        return total

    def _total_stats(self) -> dict:
        per = [self._stats()] + [o.get("stats") or {} for o in self.st.worker_out.values()]
        total: dict[str, Any] = {}
        for s in per:
            for k, v in s.items():
                if isinstance(v, dict):
                    d = total.setdefault(k, {})
                    for kk, vv in v.items():
                        d[kk] = d.get(kk, 0) + vv
                elif isinstance(v, (int, float)):
                    total[k] = round(total.get(k, 0) + v, 3)
        return total

    def _kernel_rows(self) -> list[dict]:
        uses = self._merged_uses()
        rows = []
        for n, r in self.st.results.items():
            u = uses.get(n, Counter())
            rows.append({**r, "uses": dict(u)})
        for n, u in uses.items():
            if n not in self.st.results:
                rows.append({"name": n, "status": "not warmed", "seconds": 0.0, "reason": "", "where": "",
                             "entry_id": "", "entry_path": "", "uses": dict(u)})
        return rows

    def _summary_table(self, tr: Any) -> None:
        st = self.st
        rows = self._kernel_rows()
        tr.write_sep("=", "kernelcache")
        from . import config as kc_config

        tr.write_line(f"cache: {kc_config.cache_dir()}   arch: {_arch_text()}   GPUs: {_gpu_text(st.hw)}")
        if not rows:
            tr.write_line("no kernels declared or used")
        else:
            w = max(6, *(len(r["name"]) for r in rows))
            tr.write_line(f"{'kernel':<{w}}  {'status':<10} {'seconds':>8}  {'where':<11} {'uses':>5}  reason")
            for r in rows:
                nuse = r["uses"].get("test", 0)  # tests that ran needing it
                reason = _first_line(r.get("reason") or "")
                if len(reason) > 160:
                    reason = reason[:157] + "..."
                line = (f"{r['name']:<{w}}  {r['status']:<10} {r['seconds']:>8.2f}  {r.get('where') or '':<11} "
                        f"{nuse:>5}  {reason}")
                if r["status"] == "failed":
                    tr.write_line(line, red=True)
                else:
                    tr.write_line(line)
            total = self._total_stats()
            n_workers = len(st.worker_out)
            tr.write_line(
                f"totals: {len(rows)} kernel(s); builds {total.get('builds', 0)} "
                f"({total.get('build_seconds', 0):.1f}s compiling), hits {total.get('hits', 0)}, "
                f"misses {total.get('misses', 0)}" + (f"; {n_workers} xdist worker(s)" if n_workers else ""))
        for f in st.policy_failures:
            tr.write_line(f"kernelcache: FAILED: {f}", red=True)
        path = st.opt("report_json")
        if path:
            tr.write_line(f"kernelcache: report written to {path}")

    def _write_report(self, session: pytest.Session, exitstatus: int) -> None:
        st = self.st
        path = st.opt("report_json")
        if not path:
            return
        from . import config as kc_config

        counts = Counter(t["outcome"] for t in st.tests.values() if t["outcome"])
        data = {
            "format": REPORT_FORMAT,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "session": {
                "versions": _versions(),
                "args": [str(a) for a in session.config.invocation_params.args],
                "rootdir": str(session.config.rootpath),
                "exitstatus": int(exitstatus),
                "duration_s": round(time.time() - st.t0, 3),
                "workers": sorted(st.worker_out),
                "cache_dir": str(kc_config.cache_dir()),
                "cuda_arch": os.environ.get("KERNELCACHE_CUDA_ARCH") or os.environ.get("TVM_FFI_CUDA_ARCH_LIST"),
                "gpus": st.hw,
                "options": {d: {"value": v, "source": s} for d, (v, s) in st.opts.items()},
                "build_only": bool(st.opt("build_only")),
                "policy_failures": st.policy_failures,
            },
            "kernels": self._kernel_rows(),
            "stats": {"controller": self._stats(),
                      "workers": {w: o.get("stats") for w, o in sorted(st.worker_out.items())},
                      "total": self._total_stats()},
            "summary": dict(sorted(counts.items())),
            "tests": list(st.tests.values()),
        }
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        os.replace(tmp, p)


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""


def _is_skipped(item: pytest.Item) -> bool:
    return any(m.name == "skip" for m in item.iter_markers())


def _phase_outcome(report: pytest.TestReport) -> str:
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


def _final_outcome(phases: dict[str, str]) -> str | None:
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup in ("error", "skipped", "xfailed"):
        return setup
    if call is None:
        return None
    if call == "rerun":
        return None
    if teardown == "error" and call == "passed":
        return "error"
    return call


class _XdistHooks:
    """Hooks of pytest-xdist, registered only when xdist is loaded."""

    def __init__(self, plugin: KernelCachePlugin):
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[PLUGIN_NAME] = self.plugin.worker_payload()

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = getattr(node, "workeroutput", None) or {}
        if PLUGIN_NAME in out:
            self.plugin.merge_worker(node.gateway.id, out[PLUGIN_NAME])


# -- module-level hooks (always registered) ------------------------------------------------------
MARKERS = (
    "kernel(name, ..., no_build=None): the kernels a test needs (warmed before tests run; the test "
    "errors naming the kernel if it failed to build). Needs -p kernelcache.",
    "gpu(count=1, min_arch=None): needs COUNT GPUs with compute capability >= MIN_ARCH (e.g. '9.0'); "
    "skipped with the specific reason otherwise (failed under --kc-require-gpu).",
    "suite(stage, runner=None): the CI suite (stage) and runner label of a test file, class or "
    "test; read statically by ci/rerun-test.",
)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """``--kc-run NAME...`` / ``--kc-failed-from REPORT``: turn names or a previous report's
    failures into test arguments before collection (controller and workers alike)."""
    ns = early_config.known_args_namespace
    failed_from = getattr(ns, "kc_failed_from", None)
    if failed_from:
        if not _asked_for(early_config):
            raise pytest.UsageError("--kc-failed-from needs the kernelcache plugin: add -p kernelcache")
        try:
            ids = selection.failed_from_report(Path(failed_from), early_config.rootpath,
                                               early_config.invocation_params.dir)
        except selection.SelectionError as e:
            raise pytest.UsageError(str(e)) from None
        args[:0] = ids
    specs = getattr(ns, "kc_run", None)
    if not specs:
        return
    if not _asked_for(early_config):
        raise pytest.UsageError("--kc-run needs the kernelcache plugin: add -p kernelcache")
    roots = [Path(p) for p in early_config.getini("kernelcache_test_roots")]
    if not roots:
        roots = selection.default_roots(early_config.rootpath, early_config.getini("testpaths"))
    try:
        resolved = selection.resolve(specs, roots, early_config.rootpath, early_config.invocation_params.dir)
    except selection.SelectionError as e:
        raise pytest.UsageError(str(e)) from None
    # In front: appended after a trailing `--kc-run A B` they would be swallowed by its nargs="+".
    args[:0] = [r.arg for r in resolved]


def pytest_configure(config: pytest.Config) -> None:
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    if not _asked_for(config):
        given = _kc_cli_options(config)
        if given:
            raise pytest.UsageError(f"{', '.join(given)}: the kernelcache plugin is not enabled; "
                                    "add -p kernelcache")
        return
    state = _State(config)
    config.stash[STATE] = state
    state.apply_env()
    plugin = KernelCachePlugin(state)
    if state.is_worker:
        payload = config.workerinput.get(PLUGIN_NAME) or {}  # type: ignore[attr-defined]
        state.results = {n: dict(r) for n, r in (payload.get("results") or {}).items()}
        state.hw = dict(payload.get("hw") or {})
        state.declared = list(payload.get("declared") or [])
    config.pluginmanager.register(plugin, "kernelcache-session")
    if config.pluginmanager.hasplugin("xdist") and not state.is_worker:
        config.pluginmanager.register(_XdistHooks(plugin), "kernelcache-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None:
        state.restore_env()
        del config.stash[STATE]
