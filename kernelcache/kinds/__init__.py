"""Module kinds: what a build produces and how it is admitted, one file per kind.

``KernelSpec.kind`` names a file of this package (``tvm_ffi``, ``torch_python``,
``torch_library``, ``executable``, ``flashinfer``, ``sglang``) or a kind another distribution
declares in the entry-point group ``kernelcache.kinds`` (``registry``); its ``KIND`` (a
:class:`~.base.Kind`) supplies everything that differs per kind: the plan, the key facts, the
binary's file checks, the fresh-build record, admission, the recalled call's lean load and the
label. Nothing outside this package compares a kind's name, so the next kind is one more file
here, or a package of its own.

Kinds are found by name and imported on first use, so a process that loads only tvm-ffi
modules never imports the torch kinds (nor reads entry points).
"""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..base.errors import SpecError
from .registry import GROUP, of, register

__all__ = ["GROUP", "label", "make_plan", "of", "register", "source_inputs", "source_key", "surface_main"]

if TYPE_CHECKING:
    from ..base.settings import Settings
    from ..base.spec import KernelSpec
    from ..key.plan import BuildPlan
    from .base import Kind


def make_plan(spec: "KernelSpec", settings: "Settings") -> "BuildPlan":
    """The exact compile/link plan of ``spec`` on this machine (ToolchainError when a tool is missing)."""
    kind = of(spec.kind)
    plan = kind.plan(spec, settings)
    plan.links_tvm_ffi = kind.checks.tvm_ffi  # what the level-1 key takes of tvm-ffi
    return plan


def source_key(spec: "KernelSpec", archs: tuple[str, ...], tvm_version: str, settings: "Settings",
               hashes: dict[str, str] | None = None) -> str:
    """The toolchain-free source key of ``spec`` (see ``source_key.source_key``) with its kind's facts."""
    from ..key.level1 import canonical_hash

    return canonical_hash(source_inputs(spec, archs, tvm_version, settings, hashes))


def source_inputs(spec: "KernelSpec", archs: tuple[str, ...], tvm_version: str, settings: "Settings",
                  hashes: dict[str, str] | None = None, native_cpu: list[str] | None = None) -> dict:
    """What :func:`source_key` hashes, in clear (``source_key.source_inputs``)."""
    from ..key.source_key import source_inputs as _source_inputs

    kind = of(spec.kind)
    return _source_inputs(spec, archs, tvm_version, settings, kind.key_inputs(), kind.verbatim_flags, hashes,
                          native_cpu, links_tvm_ffi=kind.checks.tvm_ffi)


def label(name: str) -> str:
    """How reports name a kind ("torch extension", ...; "" for the default tvm-ffi module)."""
    try:
        return of(name).report_label
    except SpecError:
        return name


def surface_main(argv: list[str]) -> int:
    """The surface subprocess of a fresh build: ``KIND PATH NAME`` -> one ``KC_SURFACE`` json line."""
    kind, path, name = argv
    sys.stdout.write("KC_SURFACE " + json.dumps(of(kind).surface(path, name), sort_keys=True) + "\n")
    return 0
