"""A ``load_jit`` call resolved into SGLang's own ``BuildSpec`` and the ``build.ninja`` text for it.

The route does not guess what SGLang would compile: it assembles the same ``BuildSpec`` record
``load_jit`` assembles (SGLang's default includes and flags, its target flags, its source
resolution against ``csrc/``, its registered header-only dependencies, in the same order) with
the names ``compile.loader`` bound, then asks SGLang's own ``ninja.generate`` for the build file.
That text is what SGLang's ninja would run; ``_lines`` reads the command lines out of it. The
steps this does not mirror (ROCm flag filtering, SAIL source conversion, the resource-usage
flags) are refused by ``_gate`` before this runs.
"""
from __future__ import annotations

from typing import Any

from ..base.records import FrozenRecord
from ._params import LOAD_JIT

_PARAMS = tuple(n for n in LOAD_JIT[1] if n != "args")  # load_jit's keyword-only parameters


class Request(FrozenRecord):
    """One resolved call: SGLang's ``BuildSpec`` and the build file SGLang generates for it."""

    spec: Any
    build_file: str

    @property
    def module_name(self) -> str:
        return str(self.spec.module_name)


def _bind(args: tuple, kwargs: dict) -> dict[str, Any]:
    """``load_jit``'s keyword-only parameters, with a TypeError for an unknown one (as Python's)."""
    unknown = sorted(set(kwargs) - set(_PARAMS))
    if unknown:
        raise TypeError(f"load_jit() got an unexpected keyword argument {unknown[0]!r}")
    got = {name: kwargs.get(name) for name in _PARAMS}
    if got["header_only"] is None:
        got["header_only"] = True
    return got


def resolve(loader: Any, args: tuple, kwargs: dict) -> Request:
    """The ``BuildSpec`` and build file of ``load_jit(*args, **kwargs)`` (``loader``: SGLang's
    ``compile.loader`` module). Raises what SGLang raises for a bad request (an unregistered
    dependency: ValueError)."""
    p = _bind(args, kwargs)
    include_paths = [*loader.DEFAULT_INCLUDE, *(p["extra_include_paths"] or [])]
    for dep in sorted(set(p["extra_dependencies"] or [])):
        if dep not in loader.REGISTERED_DEPENDENCIES:
            raise ValueError(f"Dependency {dep} is not registered.")
        include_paths.extend(loader.REGISTERED_DEPENDENCIES[dep]())
    spec = loader.BuildSpec(
        module_args=tuple(str(a) for a in args),
        cpp_files=loader.resolve_sources(p["cpp_files"]),
        cuda_files=loader.resolve_sources(p["cuda_files"]),
        cpp_wrappers=tuple(p["cpp_wrappers"] or ()),
        cuda_wrappers=tuple(p["cuda_wrappers"] or ()),
        cflags=tuple([*loader.DEFAULT_CFLAGS, *(p["extra_cflags"] or [])]),
        cuda_cflags=tuple([*loader.get_default_target_flags(), *(p["extra_cuda_cflags"] or [])]),
        ldflags=tuple([*loader.DEFAULT_LDFLAGS, *(p["extra_ldflags"] or [])]),
        include_paths=tuple(include_paths),
        header_only=bool(p["header_only"]),
    )
    return Request(spec, loader.ninja.generate(spec))
