"""KernelSpec: the declarative description of one kernel module to build.

A spec says *what* to build; it never says where the result lives. Paths are kept relative
to ``root`` so that the cache key does not depend on where a checkout sits on disk.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

from .errors import SpecError
from .warm_facts import name_problem  # not the layout: a spec is built on the recalled path

_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_CUDA_SUFFIXES = (".cu",)
_SOURCE_SUFFIXES = (".cc", ".cpp", ".cxx", ".c", ".cu")
# What a build produces and how it is admitted: the name of a file of kernelcache/kinds/ (a
# tvm-ffi module, the default; a torch pybind11 extension module, a library loaded into the
# process (TORCH_LIBRARY ops), a standalone executable, ...).
DEFAULT_KIND = "tvm_ffi"


def _tuple_of_str(values: Sequence[str | Path] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, (str, Path)):
        values = [values]
    return tuple(str(v) for v in values)


_FUNCTIONS_HELP = ("functions must be a mapping {name: schema or None} (e.g. {'add': "
                   "'Callable[[int, int], int]'}) or a list of names (schemas learned from the first build)")


def _function_map(spec_name: str, functions) -> dict[str, str | None]:
    """``{name: schema}`` from a mapping, or from the list of names tvm-ffi's ``functions=`` takes
    (a list means "learned": each function must exist, its schema is recorded at the first build)."""
    if functions is None:
        return {}
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, Mapping):
        items = list(functions.items())
    elif isinstance(functions, (list, tuple, set, frozenset)):
        items = [(fn, None) for fn in functions]
    else:
        raise SpecError(f"KernelSpec {spec_name!r}: {_FUNCTIONS_HELP}; got {type(functions).__name__}")
    for k, v in items:
        if not isinstance(k, str) or not _NAME_RE.match(k) or not (v is None or isinstance(v, str)):
            raise SpecError(f"KernelSpec {spec_name!r}: bad function entry {k!r}: {v!r} ({_FUNCTIONS_HELP})")
    return dict(items)


@dataclass(frozen=True)
class KernelSpec:
    """What to build: sources, include dirs, flags and the expected exported schema.

    ``functions`` maps each exported function name to its expected signature, written the way
    tvm-ffi prints a type schema, e.g. ``"Callable[[Tensor, int], None]"``. The loader refuses
    a module whose exported metadata differs, so a stale binary is never called. A schema of
    ``None`` means "learned": the function must exist, and the schemas the first good build
    exported (recorded in its manifest) are what every later load of that entry must match
    (the drop-in for ``tvm_ffi.cpp`` uses this: its callers name functions, not signatures).
    A list of names, as tvm-ffi's ``functions=`` takes, means the same: every schema learned.
    """

    name: str
    sources: Sequence[str | Path]
    root: Path | str = "."
    include_dirs: Sequence[str | Path] = ()
    system_include_dirs: Sequence[str | Path] = ()
    cflags: Sequence[str] = ()
    cuda_cflags: Sequence[str] = ()
    ldflags: Sequence[str] = ()
    functions: Mapping[str, str | None] | Sequence[str] = field(default_factory=dict)
    backend: str = "auto"  # "auto" | "cpu" | "cuda"
    kind: str = DEFAULT_KIND  # a file of kernelcache/kinds/
    # Extra ABI facts a foreign loader knows and the key must cover (torch version and C++ ABI,
    # Python ABI of a pybind11 module, ...): part of both keys, checked for foreign entries.
    abi: Mapping[str, str] = field(default_factory=dict)
    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise SpecError(f"KernelSpec.name must match [A-Za-z0-9_]+, got {self.name!r}")
        too_long = name_problem(self.name)  # refused here, not by the linker after compiling
        if too_long:
            raise SpecError(f"KernelSpec.name {self.name[:32]}... is {too_long}")
        root = Path(self.root).expanduser().resolve()
        object.__setattr__(self, "root", root)
        srcs = _tuple_of_str(self.sources)
        if not srcs:
            raise SpecError(f"KernelSpec {self.name!r} has no sources")
        for s in srcs:
            if not s.endswith(_SOURCE_SUFFIXES):
                raise SpecError(f"KernelSpec {self.name!r}: unsupported source type {s!r}")
        if len(set(srcs)) != len(srcs):
            raise SpecError(f"KernelSpec {self.name!r}: duplicate sources")
        object.__setattr__(self, "sources", srcs)
        for attr in ("include_dirs", "system_include_dirs", "cflags", "cuda_cflags", "ldflags"):
            object.__setattr__(self, attr, _tuple_of_str(getattr(self, attr)))
        fns = _function_map(self.name, self.functions)
        object.__setattr__(self, "functions", dict(sorted(fns.items())))
        if self.backend not in ("auto", "cpu", "cuda"):
            raise SpecError(f"KernelSpec {self.name!r}: backend must be auto|cpu|cuda")
        if not isinstance(self.kind, str) or not _NAME_RE.match(self.kind):
            raise SpecError(f"KernelSpec {self.name!r}: kind must name a module kind (kernelcache/kinds/)")
        object.__setattr__(self, "abi", {str(k): str(v) for k, v in sorted(dict(self.abi or {}).items())})
        if self.backend == "auto":
            backend = "cuda" if any(s.endswith(_CUDA_SUFFIXES) for s in srcs) else "cpu"
            object.__setattr__(self, "backend", backend)

    def __hash__(self) -> int:  # dict field makes the default hash fail
        return hash((self.name, self.sources, str(self.root), tuple(self.schemas.items()), self.kind))

    @property
    def schemas(self) -> dict[str, str | None]:
        """``functions`` as construction normalised it: each function's expected schema (None:
        learned). The field also takes a list of names, hence its wider declared type."""
        return cast("dict[str, str | None]", self.functions)

    # -- path helpers -------------------------------------------------------------------
    def abspath(self, p: str | Path) -> Path:
        """Resolve a spec path (relative to root unless absolute)."""
        q = Path(p).expanduser()
        return (q if q.is_absolute() else Path(self.root) / q).resolve()

    def source_paths(self) -> list[Path]:
        paths = [self.abspath(s) for s in self.sources]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise SpecError(f"KernelSpec {self.name!r}: missing source file(s): {', '.join(missing)}")
        return paths

    @property
    def is_cuda(self) -> bool:
        return self.backend == "cuda"


def specs_from_ref(ref: str, search_path: Sequence[str | Path] = ()) -> list[KernelSpec]:
    """The KernelSpecs named by ``module:callable`` (or ``module:attribute``), as the pytest
    plugin's ``kernelcache_specs`` takes them: a spec, a list, or a dict of specs.

    ``search_path`` directories are tried (prepended to ``sys.path``) when the module is not
    importable as is, e.g. the current directory for the CLI's ``--spec``.
    """
    import importlib
    import sys

    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise SpecError(f"spec reference {ref!r} must be 'module:callable'")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name not in (mod_name, mod_name.split(".")[0]):
            raise SpecError(f"spec reference {ref!r}: importing {mod_name!r} failed: {e}") from e
        for p in reversed([str(p) for p in search_path]):
            if p not in sys.path:
                sys.path.insert(0, p)
        try:
            mod = importlib.import_module(mod_name)
        except Exception as e2:  # noqa: BLE001 - any import failure is the reference's problem
            raise SpecError(f"spec reference {ref!r}: cannot import {mod_name!r}: {e2}") from e2
    except Exception as e:  # noqa: BLE001
        raise SpecError(f"spec reference {ref!r}: importing {mod_name!r} failed: {type(e).__name__}: {e}") from e
    try:
        obj = getattr(mod, attr)
    except AttributeError:
        raise SpecError(f"spec reference {ref!r}: module {mod_name!r} has no attribute {attr!r}") from None
    return specs_of_value(obj, f"spec reference {ref!r}")


def specs_of_value(obj: Any, what: str) -> list["KernelSpec"]:
    """The specs a ``module:callable`` reference names: a spec, a callable returning one, a
    mapping or an iterable of them (the CLI's ``--spec`` and the plugin's ``kernelcache_specs``)."""
    value = obj() if callable(obj) and not isinstance(obj, KernelSpec) else obj
    if isinstance(value, KernelSpec):
        items = [value]
    elif isinstance(value, Mapping):
        items = list(value.values())
    else:
        try:
            items = list(value)
        except TypeError:
            items = [value]
    for s in items:
        if not isinstance(s, KernelSpec):
            raise SpecError(f"{what} returned {type(s).__name__}, expected KernelSpec(s)")
    return items
