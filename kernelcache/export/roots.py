"""Write side of prebuilt artifacts: artifact roots (``kernelcache build``) and companion wheels.

The read side (``storage.prebuilt``) never imports this module: a serving host only reads.
Building a root drives the public loader with explicit ``Settings`` per arch (no environment
edits), then copies each entry with a relocatable manifest (``Manifest.relocatable``).
"""
from __future__ import annotations

import base64
import hashlib
import platform
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..base.events import Status
from ..base.layout import DEPSTAT, RECENT, USED, Layout
from ..base.settings import RemoteSettings, Settings, resolve
from ..entry import manifest as manifest_mod
from ..host import toolchain
from ..storage import prebuilt_sign
from ..storage.entry import Entry

if TYPE_CHECKING:  # pragma: no cover
    from ..base.spec import KernelSpec

_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


def export_entry(entry: Entry, out: Path, cuda_major: str | None, labels: dict | None = None,
                 sign: Path | None = None) -> Path:
    """Copy a cache entry into an artifact root with a relocatable manifest (``labels`` added
    to its ``prebuilt`` record); ``sign``: an Ed25519 private key whose signature over the
    manifest and the binary is written beside them (``storage.prebuilt_sign``)."""
    m = entry.manifest
    dest = Layout(out).entry_dir(m.name, m.key1, m.entry_id)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(entry.so_path, dest / m.so_name)
    rm = m.relocatable(cuda_major)
    rm.prebuilt = {**(rm.prebuilt or {}), **(labels or {})}
    manifest_mod.write(dest, rm)
    if sign is not None:
        prebuilt_sign.sign_entry(dest, sign)
    return dest


def build_artifact_root(names: list[str] | None, archs: list[str], out: Path,
                        settings: Settings | None = None, specs: "Mapping[str, KernelSpec] | None" = None,
                        sign: Path | None = None) -> list[dict]:
    """Build kernels (per arch for CUDA ones) into a relocatable artifact root: the
    shipped ones by ``names``, or ``specs`` (a project's KernelSpecs of any kind: a torch
    extension's from ``cpp_extension.make_spec``, the exact spec its ``load`` call makes).
    A CUDA kernel is built for each of ``archs``, else for the settings' arch. ``sign``: see
    :func:`export_entry`."""
    from ..kernels import shipped_specs
    from ..lookup.loader import load_with_result

    base = resolve(settings).replace(no_build=False, prebuilt=(), remote=RemoteSettings())
    out = Path(out).resolve()
    report: list[dict[str, Any]] = []
    chosen = dict(specs) if specs is not None else shipped_specs(names, base)
    for name, spec in chosen.items():
        spec_archs: list[str | None] = [*archs] if archs and spec.is_cuda else [None]
        for arch in spec_archs:
            if spec.is_cuda and arch is None and not base.cuda_arch:
                report.append({"name": name, "status": Status.FAILED,
                               "reason": "CUDA kernel needs --arch (or KERNELCACHE_CUDA_ARCH)"})
                continue
            s = base.replace(cuda_arch=arch) if arch else base
            t0 = time.monotonic()
            try:
                _, res = load_with_result(spec, s)
            except Exception as e:  # noqa: BLE001 - reported per kernel
                report.append({"name": name, "status": Status.FAILED, "arch": arch, "reason": str(e)[:300],
                               "seconds": time.monotonic() - t0})
                continue
            m = manifest_mod.read(Path(res.entry_path))
            if m is None:
                report.append({"name": name, "status": Status.FAILED, "arch": arch, "reason": "entry vanished"})
                continue
            dest = export_entry(Entry(Path(res.entry_path), m), out, toolchain.nvcc_major() if spec.is_cuda else None,
                                sign=sign)
            report.append({"name": name, "status": res.status, "arch": arch, "seconds": time.monotonic() - t0,
                           "entry": str(dest.relative_to(out))})
    return report


def export_flashinfer(texts: list[str], out: Path, settings: Settings | None = None,
                      sign: Path | None = None) -> list[dict]:
    """Build (or hit) the FlashInfer modules ``texts`` name through the route and copy them into
    an artifact root, each labelled with this FlashInfer's version and its headers' hashes: a
    serving host with another FlashInfer refuses the entry with one line (``kinds/flashinfer.py``),
    since a root keeps only the module's own sources' hashes, not FlashInfer's headers."""
    from .. import flashinfer
    from ..kinds.flashinfer import VERSION_LABEL, header_labels, installed_version

    base = resolve(settings).replace(no_build=False, prebuilt=(), remote=RemoteSettings())
    out = Path(out).resolve()
    label = installed_version()
    report = []
    for row in flashinfer.built(texts, base):
        entry_path = row.pop("entry_path", None)
        m = manifest_mod.read(Path(entry_path)) if entry_path else None
        if entry_path and m is None:
            row.update(status=Status.FAILED, reason="entry vanished")
        if m is not None:
            labels = {VERSION_LABEL: label, **header_labels(m)}
            dest = export_entry(Entry(Path(entry_path), m), out, toolchain.nvcc_major(), labels, sign)
            row.update(entry=str(dest.relative_to(out)), arch=",".join(m.archs), flashinfer=label)
        report.append(row)
    return report


def export_sglang(texts: list[str], out: Path, settings: Settings | None = None,
                  sign: Path | None = None) -> list[dict]:
    """Build (or hit) the SGLang JIT modules the factories ``texts`` name load through the route and
    copy them into an artifact root, each labelled with this SGLang's version: a serving host with
    another SGLang refuses the entry with one line (``kinds/sglang.py``)."""
    from ..kinds.sglang import VERSION_LABEL, installed_version
    from ..sglang import built

    base = resolve(settings).replace(no_build=False, prebuilt=(), remote=RemoteSettings())
    out = Path(out).resolve()
    label = installed_version()
    report = []
    for row in built(texts, base):
        entry_path = row.pop("entry_path", None)
        m = manifest_mod.read(Path(entry_path)) if entry_path else None
        if entry_path and m is None:
            row.update(status=Status.FAILED, reason="entry vanished")
        if m is not None:
            cuda = toolchain.nvcc_major() if m.archs else None
            dest = export_entry(Entry(Path(entry_path), m), out, cuda, {VERSION_LABEL: label}, sign)
            row.update(entry=str(dest.relative_to(out)), arch=",".join(m.archs), sglang=label)
        report.append(row)
    return report


# -- companion wheels ----------------------------------------------------------------------------
def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def pack_wheel(root: Path, out_dir: Path, tag: str, version: str = "0.1.0") -> Path:
    """Write ``kernelcache_prebuilt_<tag>-<version>-py3-none-linux_<arch>.whl`` into out_dir.

    The wheel holds the root as package data and registers it in the ``kernelcache.prebuilt``
    entry-point group, so installing it next to kernelcache is all a serving host needs.
    Written with zipfile (a wheel is a zip with a dist-info dir): no build backend, no network.
    """
    root = Path(root).resolve()
    if not _TAG_RE.match(tag):
        raise ValueError(f"tag must match [a-z0-9_]+, got {tag!r}")
    if not Layout(root).is_artifact_root():
        raise ValueError(f"{root} is not an artifact root (no v1/entries); make one with `kernelcache build`")
    pkg = f"kernelcache_prebuilt_{tag}"
    dist = f"kernelcache_prebuilt_{tag}-{version}"
    plat = f"linux_{platform.machine()}"
    files: dict[str, bytes] = {
        f"{pkg}/__init__.py": (
            '"""Prebuilt kernelcache artifacts (validated by kernelcache before use)."""\n'
            "from pathlib import Path\n\n\n"
            "def root() -> Path:\n    return Path(__file__).parent / \"root\"\n"
        ).encode(),
    }
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in (USED, DEPSTAT, RECENT):
            files[f"{pkg}/root/{p.relative_to(root).as_posix()}"] = p.read_bytes()
    files[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: kernelcache-prebuilt-{tag.replace('_', '-')}\nVersion: {version}\n"
        "Summary: Prebuilt kernelcache artifact root\nRequires-Dist: kernelcache\n"
    ).encode()
    files[f"{dist}.dist-info/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: kernelcache.export.roots\nRoot-Is-Purelib: false\nTag: py3-none-{plat}\n"
    ).encode()
    files[f"{dist}.dist-info/entry_points.txt"] = f"[kernelcache.prebuilt]\n{tag} = {pkg}:root\n".encode()
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()]
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    whl = out_dir / f"{dist}-py3-none-{plat}.whl"
    with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return whl
