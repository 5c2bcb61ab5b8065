"""The option table and its precedence: ini < environment < command line (< marker, per test).

Why one table: every option has a flag, an ini key and an environment variable, and the three
must never drift apart (help text, validation, the JSON report's ``options`` and the deprecated
aliases all come from the same row). The environment is read through
:func:`kernelcache.base.settings.kc_environ` (the one reader of ``KERNELCACHE_*``, which also maps
deprecated variable names), never from ``os.environ`` directly.
"""
from __future__ import annotations

import os
import shlex
import warnings
from dataclasses import dataclass
from typing import AbstractSet, Any, Mapping

import pytest

from kernelcache.base.settings import DEPRECATED_ENV, REMOTE_MODES, kc_environ

PLUGIN_NAME = "kernelcache"
WARM_MODES = ("auto", "controller", "off")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
AFFECTED_MODES = ("enforce", "report")


@dataclass(frozen=True)
class Opt:
    """One option: where it can be given, how its value is checked, where it goes."""

    dest: str
    cli: str
    ini: str
    env: str
    kind: str  # "str" | "path" | "bool" | "int" | "list" | "choice" | "arch" (CUDA arch list)
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    setting: str | None = None  # the kernelcache.base.settings.Settings field it sets
    old_cli: str | None = None  # deprecated flag, still accepted (with a warning)
    old_ini: str | None = None  # deprecated ini key, still accepted (with a warning)
    old_env: str | None = None  # deprecated variable (kc_environ maps and warns)


OPTIONS: tuple[Opt, ...] = (
    Opt("cache_dir", "--kc-cache-dir", "kernelcache_dir", "KERNELCACHE_DIR", "path", None,
        "cache root (default: ~/.cache/kernelcache)", setting="cache_dir"),
    Opt("lock_dir", "--kc-lock-dir", "kernelcache_lock_dir", "KERNELCACHE_LOCK_DIR", "path", None,
        "node-local directory for build locks (default: under the temp dir)", setting="lock_dir"),
    Opt("warm", "--kc-warm", "kernelcache_warm", "KERNELCACHE_WARM", "choice", "auto",
        "auto: warm declared kernels in the controller, then kernels found only at collection in "
        "the collecting process; controller: only the controller builds (an undeclared kernel is "
        "an error); off: load lazily inside tests", choices=WARM_MODES,
        old_cli="--kc-prebuild", old_ini="kernelcache_prebuild", old_env="KERNELCACHE_PREBUILD"),
    Opt("no_build", "--kc-no-build", "kernelcache_no_build", "KERNELCACHE_NO_BUILD", "bool", False,
        "a cache miss is an error naming the kernel and the reason (runners that must hit)",
        setting="no_build"),
    Opt("rebuild", "--kc-rebuild", "kernelcache_rebuild", "KERNELCACHE_REBUILD", "bool", False,
        "ignore cached entries and rebuild every warmed kernel once", setting="rebuild"),
    Opt("cuda_arch", "--kc-arch", "kernelcache_cuda_arch", "KERNELCACHE_CUDA_ARCH", "arch", None,
        "CUDA target arch(s), e.g. 9.0 or '8.0,9.0' (default: TVM_FFI_CUDA_ARCH_LIST, else the "
        "detected GPUs)", setting="cuda_arch"),
    Opt("build_only", "--kc-build-only", "kernelcache_build_only", "KERNELCACHE_BUILD_ONLY", "bool", False,
        "build every declared kernel (CUDA included, no GPU needed), print the summary and exit"),
    Opt("report_json", "--kc-report-json", "kernelcache_report_json", "KERNELCACHE_REPORT_JSON", "path", None,
        "write a JSON report (session, kernels, counters, per-test outcomes) to this path"),
    Opt("require_gpu", "--kc-require-gpu", "kernelcache_require_gpu", "KERNELCACHE_REQUIRE_GPU", "bool", False,
        "GPU tests that cannot run fail instead of skipping, and the run fails when no GPU is "
        "detected or every gpu-marked test was skipped"),
    Opt("kernels", "--kc-kernels", "kernelcache_kernels", "KERNELCACHE_KERNELS", "list", (),
        "kernels to warm: names (shipped kernels or ones from kernelcache_specs) or FlashInfer modules "
        "as MODULE:FUNC(ARGS) (built through the FlashInfer route); comma/space separated"),
    Opt("specs", "--kc-spec", "kernelcache_specs", "KERNELCACHE_SPECS", "list", (),
        "module:callable returning extra KernelSpec(s) (a spec, a list, or a dict) that markers and "
        "kernelcache_kernels can name; --kc-build-only builds all of them"),
    Opt("jobs", "--kc-jobs", "kernelcache_jobs", "KERNELCACHE_JOBS", "int", None,
        "kernels built in parallel while warming (default: the loader's)"),
    Opt("hardware", "--kc-hardware", "kernelcache_hardware", "KERNELCACHE_HARDWARE", "str", "auto",
        "auto (detect with nvidia-smi), or a stand-in: cpu, 2x9.0, '8.0,9.0'"),
    Opt("remote", "--kc-remote", "kernelcache_remote", "KERNELCACHE_REMOTE", "str", None,
        "fleet cache URL (s3://, gs://, az://, file://) searched after the local cache",
        setting="remote"),
    Opt("remote_mode", "--kc-remote-mode", "kernelcache_remote_mode", "KERNELCACHE_REMOTE_MODE", "choice",
        None, "read (default with a remote): fetch only; readwrite: also upload what this run "
        "builds; off: ignore the remote", choices=REMOTE_MODES, setting="remote_mode"),
    Opt("patch", "--kc-patch", "kernelcache_patch", "KERNELCACHE_PATCH", "str", None,
        "route foreign JIT APIs through kernelcache in every process of the session: tvm_ffi "
        "(tvm_ffi.cpp), torch (torch.utils.cpp_extension), flashinfer (FlashInfer's nvcc JIT), sglang "
        "(SGLang's load_jit), comma separated, or all", setting="patch"),
    Opt("patch_tvm_ffi", "--kc-patch-tvm-ffi", "kernelcache_patch_tvm_ffi", "KERNELCACHE_PATCH_TVM_FFI",
        "bool", False, "same as --kc-patch=tvm_ffi", setting="patch_tvm_ffi"),
    Opt("impact_map", "--kc-impact-map", "kernelcache_impact_map", "KERNELCACHE_IMPACT_MAP", "path", None,
        "test impact map: read for --kc-affected-since, and written (merged) with what this run's tests used"),
    Opt("affected_since", "--kc-affected-since", "kernelcache_affected_since", "KERNELCACHE_AFFECTED_SINCE",
        "str", None, "run only the tests a change since REF (git diff REF...HEAD + uncommitted) can affect"),
    Opt("affected_mode", "--kc-affected-mode", "kernelcache_affected_mode", "KERNELCACHE_AFFECTED_MODE", "choice",
        "enforce", "enforce: deselect what --kc-affected-since finds unaffected; report: run everything and "
        "report what would have been deselected and whether any of those failed", choices=AFFECTED_MODES),
    Opt("lock", "--kc-lock", "kernelcache_lock", "KERNELCACHE_LOCK", "path", None,
        "kernel lock to serve under: a load of a kernel it lacks, or whose inputs or key here differ, fails "
        "before any build step (kernelcache.lockfile)", setting="lock"),
    Opt("lock_mode", "--kc-lock-mode", "kernelcache_lock_mode", "KERNELCACHE_LOCK_MODE", "choice", "error",
        "error: a load the kernel lock does not describe fails; warn: it is logged and loaded",
        choices=("error", "warn"), setting="lock_mode"),
    Opt("lock_record", "--kc-lock-record", "kernelcache_lock_record", "KERNELCACHE_LOCK_RECORD", "path", None,
        "record every kernel the session loads (all processes, xdist workers merged) into this kernel lock",
        setting="lock_record"),
)
BY_DEST = {o.dest: o for o in OPTIONS}

Resolved = dict[str, tuple[Any, str]]  # dest -> (value, source: default/ini/env/cli, lists: "ini+cli")


def add_options(parser: pytest.Parser) -> None:
    """Register every flag and ini key (also when the plugin is installed but not asked for, so
    ``--help`` lists them and a stray ``--kc-*`` flag can be reported precisely)."""
    group = parser.getgroup(PLUGIN_NAME, "kernelcache: warm JIT kernels once, report, rerun by name "
                            "(active with -p kernelcache)")
    for o in OPTIONS:
        where = f"ini {o.ini}, env {o.env}"
        group.addoption(o.cli, **_cli_kwargs(o, f"{o.help} [{where}]"))
        if o.old_cli:
            group.addoption(o.old_cli, **_cli_kwargs(o, f"deprecated alias of {o.cli}", dest=f"kc_old_{o.dest}"))
        _add_ini(parser, o.ini, o)
        if o.old_ini:
            _add_ini(parser, o.old_ini, o, f"deprecated alias of {o.ini} (env {o.old_env} is deprecated too)")
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


def _cli_kwargs(o: Opt, help: str, dest: str | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = {"dest": dest or f"kc_{o.dest}", "default": None, "help": help}
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
    return kw


def _add_ini(parser: pytest.Parser, name: str, o: Opt, help: str | None = None) -> None:
    if o.kind == "bool":
        parser.addini(name, help or o.help, type="bool", default=False)
    elif o.kind == "list":
        parser.addini(name, help or o.help, type="linelist", default=[])
    else:
        parser.addini(name, help or o.help, type="string", default="")


# -- the space form of path options --------------------------------------------------------------
def path_flags() -> tuple[str, ...]:
    """Flags whose value is a path (``--kc-failed-from`` too): only their ``=`` form is safe."""
    return (*(o.cli for o in OPTIONS if o.kind == "path"), "--kc-failed-from")


def check_path_forms(config: pytest.Config) -> None:
    """Refuse ``--kc-report-json PATH`` (space form) with a usage error naming the ``=`` form.

    pytest picks the rootdir and ini file from the command line's test paths before any plugin
    is loaded, so a separate PATH that exists counts as a test path: the rootdir moves, the ini
    is not read and node ids change (``--kc-failed-from`` then finds no tests). Whether it
    harms depends on whether PATH exists yet, so the space form is refused always.
    """
    tokens = [str(a) for a in (config.invocation_params.args or ())]
    try:
        tokens += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        pass
    flags = path_flags()
    for i, t in enumerate(tokens[:-1]):
        if t in flags:
            raise pytest.UsageError(
                f"kernelcache: write {t}={tokens[i + 1]} (with '='): pytest reads a separate "
                f"{tokens[i + 1]!r} as a test path when it picks the rootdir and ini file "
                f"(rootdir here: {config.rootpath}), which changes node ids and drops the ini")


# -- conversion ----------------------------------------------------------------------------------
def split_list(values: Any) -> list[str]:
    """``["a,b", "c d"]`` -> ``["a", "b", "c", "d"]`` (comma or space separated, repeatable).
    Separators inside parentheses or quotes stay: a FlashInfer module in ``--kc-kernels`` is
    ``MODULE:FUNC(ARGS)`` (``gen_x("a", 2)``)."""
    out: list[str] = []
    for v in values or ():
        tok, depth, quote = "", 0, ""
        for ch in str(v):
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif depth <= 0 and (ch == "," or ch.isspace()):
                out += [tok] if tok else []
                tok = ""
                continue
            tok += ch
        out += [tok] if tok else []
    return out


def convert(o: Opt, raw: Any, where: str) -> Any:
    """Check and convert one raw value; a bad value is a usage error naming where it came from."""
    if o.kind == "bool":
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s in TRUE_WORDS:
            return True
        if s in FALSE_WORDS:
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
    if o.kind == "arch" and s:
        check_arch(s, where)
    return s or None


def check_arch(value: str, where: str) -> None:
    """A CUDA arch that is set but cannot be parsed is a usage error: a typo in CI must not
    silently skip the CUDA build."""
    from kernelcache.host.gpu import ArchError, parse_arch_list

    try:
        parse_arch_list(value)
    except ArchError as e:
        raise pytest.UsageError(f"kernelcache: {where}={value!r}: {e}") from None


# -- resolution ----------------------------------------------------------------------------------
def read_environ(config: pytest.Config) -> tuple[dict[str, str], set[str]]:
    """``kc_environ()`` and the deprecated names it mapped; its deprecation warnings are
    re-issued as pytest config-time warnings (shown in the warnings summary; ``-W error``
    makes them errors)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = kc_environ()
    old_used = set()
    for w in caught:
        config.issue_config_time_warning(pytest.PytestDeprecationWarning(str(w.message)), stacklevel=2)
        old_used |= {old for old in DEPRECATED_ENV if str(w.message).startswith(old + " ")}
    return env, old_used


def resolve(config: pytest.Config, env: Mapping[str, str], old_env_used: AbstractSet[str] = frozenset()) -> Resolved:
    """dest -> (value, source); precedence ini < env < CLI; list options accumulate instead.

    ``env`` is what :func:`read_environ` returned; ``old_env_used`` only changes how a bad
    value's error names its variable (after what the user actually set)."""
    out: Resolved = {}
    for o in OPTIONS:
        cli = _cli_value(config, o)
        ini_raw, ini_name = _ini_value(config, o)
        env_name = o.old_env if o.old_env in old_env_used else o.env
        if o.kind == "list":
            vals: list[str] = []
            srcs = []
            for src, raw in (("ini", ini_raw), ("env", [env.get(o.env, "")]), ("cli", cli)):
                items = split_list(raw)
                if items:
                    vals += items
                    srcs.append(src)
            out[o.dest] = (list(dict.fromkeys(vals)), "+".join(srcs) or "default")
            continue
        value, source = o.default, "default"
        if o.kind == "bool":
            if ini_raw:
                value, source = True, "ini"
        elif str(ini_raw).strip():
            value, source = convert(o, ini_raw, f"ini {ini_name}"), "ini"
        if o.env in env and (o.kind == "bool" or env[o.env].strip()):
            value, source = convert(o, env[o.env], f"env {env_name}"), "env"
        if cli not in (None, False):
            value, source = convert(o, cli, o.cli), "cli"
        if o.kind == "path" and value and source == "ini" and config.inipath is not None:
            value = str((config.inipath.parent / os.path.expanduser(value)).resolve())
        elif o.kind == "path" and value:
            value = os.path.abspath(os.path.expanduser(value))
        elif o.kind == "arch" and not value:  # Settings falls back to tvm-ffi's variable
            fallback = os.environ.get("TVM_FFI_CUDA_ARCH_LIST", "").strip()
            if fallback:
                check_arch(fallback, "TVM_FFI_CUDA_ARCH_LIST")
        out[o.dest] = (value, source)
    return out


def _cli_value(config: pytest.Config, o: Opt) -> Any:
    value = getattr(config.option, f"kc_{o.dest}", None)
    old = getattr(config.option, f"kc_old_{o.dest}", None) if o.old_cli else None
    if old not in (None, False):
        config.issue_config_time_warning(
            pytest.PytestDeprecationWarning(f"{o.old_cli} is deprecated; use {o.cli}"), stacklevel=2)
        if value in (None, False):
            return old
    return value


def _ini_value(config: pytest.Config, o: Opt) -> tuple[Any, str]:
    value = config.getini(o.ini)
    if o.old_ini:
        old = config.getini(o.old_ini)
        if old:
            config.issue_config_time_warning(
                pytest.PytestDeprecationWarning(f"ini {o.old_ini} is deprecated; use {o.ini}"), stacklevel=2)
            if not value:
                return old, o.old_ini
    return value, o.ini
