"""``kernelcache build --lock PATH --out ROOT``: exactly the locked set, into an artifact root.

Why from the lock and not from the app: a CPU runner (no GPU, no app, no model) builds what the
service will load, each kernel from its lock block's "what rebuilds it" (the KernelSpec as data;
a drop-in's generated sources from the lock's sidecar ``<lock>.sources/``, written into this
host's cache first, so an empty cache builds them; a foreign route's recorded call, e.g.
FlashInfer's ``MODULE:FUNCTION(args)``, where neither has them). A kernel whose locked inputs moved, or whose key here is not the
locked one, is reported and not built: the root must hold what the lock names, so the node's
locked serving (``KERNELCACHE_LOCK``) admits it. Then ``pack`` (wheel), ``pack --oci`` and
``push`` work on the root as on any other.

Archs: a CPU kernel is built once; a CUDA kernel for each ``--arch`` value (a comma list, e.g.
``8.0,9.0``, is one multi-arch entry, as everywhere else), else for each arch the lock records.
A kind whose flags are another JIT's complete lines (FlashInfer, SGLang) carries its gencode set
in its flags, so it is built for the archs the lock records, whatever ``--arch`` says.
"""
from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import kinds
from ..base.errors import KernelCacheError
from ..base.settings import RemoteSettings, Settings, resolve
from ..entry import manifest as manifest_mod
from ..host import toolchain
from ..storage.entry import Entry
from .roots import export_entry, export_flashinfer, export_sglang

if TYPE_CHECKING:  # pragma: no cover
    from ..base.spec import KernelSpec
    from ..lockfile.format import KernelLock

HOST = "host"  # the lock's arch label of a CPU kernel
_CALL_EXPORTS = {"flashinfer": export_flashinfer, "sglang": export_sglang}  # route -> its MODULE:FUNC exporter


def export_labels(kind: str, m: manifest_mod.Manifest) -> dict[str, Any]:
    """What an exported entry of ``kind`` must carry for a serving host to judge it (the foreign
    kinds' version, FlashInfer's header hashes), as ``export_flashinfer``/``export_sglang`` add."""
    mod = importlib.import_module(type(kinds.of(kind)).__module__)
    out: dict[str, Any] = {}
    label, version = getattr(mod, "VERSION_LABEL", None), getattr(mod, "installed_version", None)
    if label and callable(version):
        out[label] = version()
    headers = getattr(mod, "header_labels", None)
    if callable(headers):
        out.update(headers(m))
    return out


def _targets(k: "KernelLock", spec: "KernelSpec", archs: list[str]) -> list[str]:
    """The arch labels to build ``k`` for (``host`` for a CPU kernel)."""
    locked = sorted(a for a in k.archs if a != HOST)
    if not spec.is_cuda:
        return [HOST]
    if archs and not kinds.of(spec.kind).verbatim_flags:
        return list(archs)
    return locked


def _row(name: str, label: str, status: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "arch": None if label == HOST else label, **kw}


def _by_call(k: "KernelLock", out: Path, s: Settings) -> list[dict[str, Any]] | None:
    """Replay a foreign route's recorded call (None: the block names none)."""
    route, call = k.rebuild.get("route"), k.rebuild.get("call")
    exporter = _CALL_EXPORTS.get(str(route))
    if not call or exporter is None:
        return None
    rows = [r for r in exporter([str(call)], out, s) if r.get("name") == k.name or r.get("status") == "failed"]
    return rows or [_row(k.name, HOST, "failed", reason=f"{call} did not load a module named {k.name!r}")]


def _build_one(k: "KernelLock", spec: "KernelSpec", label: str, out: Path, base: Settings) -> dict[str, Any]:
    from ..lockfile.drift import key_drift
    from ..lookup.loader import load_with_result

    s = base if label == HOST else base.replace(cuda_arch=label)
    note = ""
    if label in k.archs:
        lines = key_drift(k, spec, s, label)
        if lines:
            return _row(k.name, label, "failed", reason="not the locked key here: " + "; ".join(lines))
    else:
        note = f"arch {label} is not in the lock (built from its inputs; record or `lock update` for it)"
    t0 = time.monotonic()
    try:
        _, res = load_with_result(spec, s)
    except Exception as e:  # noqa: BLE001 - reported per kernel, the others still build
        return _row(k.name, label, "failed", reason=str(e)[:300], seconds=time.monotonic() - t0)
    m = manifest_mod.read(Path(res.entry_path))
    if m is None:
        return _row(k.name, label, "failed", reason="entry vanished")
    dest = export_entry(Entry(Path(res.entry_path), m), out, toolchain.nvcc_major() if spec.is_cuda else None,
                        export_labels(spec.kind, m))
    return _row(k.name, label, str(res.status), seconds=time.monotonic() - t0, entry=str(dest.relative_to(out)),
                **({"reason": note} if note else {}))


def build_locked(lock_path: str | os.PathLike[str], archs: list[str], out: Path,
                 settings: Settings | None = None) -> list[dict[str, Any]]:
    """Build every kernel the lock at ``lock_path`` names into the artifact root ``out``; one
    report row per kernel and arch (``status``: built, hit, ... or ``failed`` with a ``reason``)."""
    from ..lockfile import read
    from ..lockfile.drift import inputs_drift
    from ..lockfile.paths import Anchors, spec_from_data
    from ..lockfile.sidecar import restore

    path = os.path.abspath(lock_path)
    lock = read(path)
    base = resolve(settings).replace(no_build=False, prebuilt=(), remote=RemoteSettings(), lock=None,
                                     lock_record=None)
    out = Path(out).resolve()
    a = Anchors(path, base.cache_dir)
    report: list[dict[str, Any]] = []
    for name, k in sorted(lock.kernels.items()):
        try:
            restore(k, a, path)  # a drop-in's generated sources, from the lock's sidecar into this cache
            spec = spec_from_data(k.rebuild["spec"], a)
        except (KernelCacheError, KeyError, TypeError, ValueError) as e:
            report.append(_row(name, HOST, "failed", reason=f"its lock block does not rebuild it here: {e}"))
            continue
        moved = inputs_drift(k, Path(spec.root))
        if moved and all(line.endswith(" removed") for line in moved):
            replayed = _by_call(k, out, base)  # generated sources of a foreign call: made again by the call
            if replayed is not None:
                report += replayed
                continue
        if moved:
            report.append(_row(name, HOST, "failed", reason="the lock no longer describes its sources here: "
                               + "; ".join(moved) + " (see `kernelcache lock check`)"))
            continue
        targets = _targets(k, spec, archs)
        if not targets:
            report.append(_row(name, HOST, "failed", reason="a CUDA kernel the lock records no arch for: "
                               "give --arch"))
        report += [_build_one(k, spec, label, out, base) for label in targets]
    return report
