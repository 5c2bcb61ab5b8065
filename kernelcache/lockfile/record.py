"""Record: one loaded kernel -> its lock block, written into ``Settings.lock_record``.

Why from the loader's result: every route (``kc.load``, the shipped kernels, the tvm-ffi, torch,
FlashInfer and SGLang drop-ins) ends in ``loader.load_with_result`` with a KernelSpec and the
entry it was served (its manifest: key, source key, headers read, tools, binary sha256), so one
call there records them all. A recalled load never gets here, which is why ``recall`` takes the
full path while a lock records (``KERNELCACHE_LOCK_RECORD`` is one of its full-path settings).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Mapping

from .. import kinds
from ..base.errors import KernelCacheError, ToolchainError
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry import manifest as manifest_mod
from ..host import gpu, toolchain
from ..host.anchors import PACKAGE_DIR, ROOT
from ..key import level1
from . import sidecar
from .format import HOST_ARCH, ArchLock, KernelLock, merge_into
from .paths import Anchors, spec_to_data

# What a foreign route knows about the call it is loading for (``rebuild_as``): kept in the block
_CALL: ContextVar[dict[str, str] | None] = ContextVar("kernelcache_lock_call", default=None)


@contextmanager
def rebuild_as(route: str, call: str) -> Iterator[None]:
    """Loads inside are recorded with ``{"route": route, "call": call}`` in their ``rebuild``
    (a drop-in naming the foreign call as data, e.g. FlashInfer's ``MODULE:FUNCTION(args)``)."""
    token = _CALL.set({"route": route, "call": call})
    try:
        yield
    finally:
        _CALL.reset(token)


def arch_label(spec: KernelSpec, s: Settings) -> tuple[tuple[str, ...], str]:
    """This host's target archs for ``spec`` and their label in the lock (``host`` for CPU)."""
    archs = gpu.target_archs(s.cuda_arch) if spec.is_cuda else ()
    return archs, ",".join(archs) or HOST_ARCH


def source(spec: KernelSpec, s: Settings, archs: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """(source key, its inputs) of ``spec`` here: no compiler needed (a node checks this)."""
    tvm = toolchain.tvm_ffi_paths(s.memo_dir).version
    inputs = kinds.source_inputs(spec, archs, tvm, s, level1.source_hashes(spec))
    return level1.canonical_hash(inputs), inputs


def _tool_line(v: Any) -> str:
    """The line of a ``--version`` text naming the release (nvcc's "release" line; a compiler's
    first line). A relocated manifest (a prebuilt root's) keeps only the last line."""
    lines = [str(x).strip() for x in (v if isinstance(v, list) else str(v or "").splitlines()) if str(x).strip()]
    return next((ln for ln in lines if "release" in ln), lines[0] if lines else "")


def toolchain_of(inputs: dict[str, Any]) -> dict[str, str]:
    """The tool and package identities a key used, as lines a reviewer reads (no sizes, mtimes)."""
    out = {str(k): _tool_line((v or {}).get("version")) for k, v in (inputs.get("tools") or {}).items()}
    tvm = (inputs.get("abi") or {}).get("tvm_ffi_version")
    if tvm:
        out["tvm_ffi"] = str(tvm)
    return out


def _rebuild(spec: KernelSpec, a: Anchors) -> dict[str, Any]:
    out: dict[str, Any] = {"route": "spec", "spec": spec_to_data(spec, a)}
    shipped = getattr(sys.modules.get("kernelcache.kernels"), "KERNEL_PACKAGES", {})
    root = os.path.realpath(spec.root)
    if spec.name in shipped and (root == PACKAGE_DIR or root.startswith(PACKAGE_DIR + os.sep)):
        out.update(route="shipped", ref=f"{shipped[spec.name]}.spec:spec")
    call = _CALL.get()
    if call is not None:
        out.update(call)
    return out


def kernel_block(spec: KernelSpec, s: Settings, entry_path: str, lock_path: str | os.PathLike[str]) -> KernelLock:
    """The lock block of ``spec`` as served from ``entry_path`` on this host."""
    m = manifest_mod.read(entry_path)  # type: ignore[arg-type]
    if m is None:
        raise KernelCacheError(f"kernel {spec.name!r}: no readable manifest in {entry_path} to record in the lock")
    a = Anchors(lock_path, s.cache_dir)
    inputs = {rel: "sha256:" + h for rel, h in level1.source_hashes(spec).items()}
    prefix = ROOT + "/"
    for d in m.deps:
        if d["path"].startswith(prefix):
            inputs[d["path"][len(prefix):]] = "xxh3:" + d["xxh3"]
    archs, label = arch_label(spec, s)
    skey, sin = source(spec, s, archs)
    rec = ArchLock(source_key=skey, source_inputs=sin, key=m.key1, binary_sha256=m.so_sha256,
                   toolchain=toolchain_of(m.inputs))
    fns = spec.functions if isinstance(spec.functions, Mapping) else {}  # a dict after __post_init__
    schema = {str(k): v for k, v in (m.schemas or fns).items()}
    root, rebuild = a.to_lock(spec.root), _rebuild(spec, a)
    if sidecar.is_generated(root):  # a drop-in's generated sources: kept beside the lock
        rebuild["generated"] = sidecar.save(spec.root, lock_path)
    return KernelLock(name=spec.name, kind=spec.kind, root=root, rebuild=rebuild,
                      inputs=inputs, schema=schema, archs={label: rec})


def note(spec: KernelSpec, s: Settings, entry_path: str) -> None:
    """Record one load into ``s.lock_record`` (merged under a file lock)."""
    assert s.lock_record is not None
    try:
        block = kernel_block(spec, s, entry_path, s.lock_record)
    except ToolchainError as e:
        raise KernelCacheError(f"kernel {spec.name!r}: cannot record it in the lock {s.lock_record}: {e}") from e
    merge_into(s.lock_record, [block], s.lock_dir)
