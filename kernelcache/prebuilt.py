"""Read-only prebuilt artifact roots: production without a compiler, never trusted blindly.

An artifact root has the cache's entry layout. Its manifests are made relocatable when the
root is built (``kernelcache build``): only package files (``${ROOT}``-anchored sources and
headers) keep their recorded paths and hashes; toolchain paths are dropped. An artifact is
used only if it validates against *this* installation: the same source and header bytes as
the installed package, a compatible tvm-ffi ABI, a loadable CUDA runtime of the same major
version and a matching arch, the expected schemas, then checksum and identity like any entry.

Roots come from KERNELCACHE_PREBUILT (a path list) and from installed companion packages that
register an entry point in the group ``kernelcache.prebuilt`` (a callable returning the root).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from . import config, key, schema, store, toolchain
from .errors import ToolchainError
from .plan import ROOT
from .spec import KernelSpec

ENTRY_POINT_GROUP = "kernelcache.prebuilt"
_ep_roots: list[Path] | None = None


def _scan_entry_points() -> list[str]:
    from importlib.metadata import entry_points

    roots = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            root = value() if callable(value) else value
            roots.append(str(Path(root).resolve()))
        except Exception:  # noqa: BLE001 - a broken companion must not break loading
            continue
    return roots


def entry_point_roots() -> list[Path]:
    """Roots registered by installed companion wheels.

    Scanning package metadata costs milliseconds on every process start, so the result is
    memoised on disk keyed by the mtimes of the sys.path directories (installing or removing
    a package changes its site-packages directory).
    """
    global _ep_roots
    if _ep_roots is None:
        import sys

        stamp = []
        for p in sys.path:
            try:
                stamp.append((p, os.stat(p or ".").st_mtime_ns))
            except OSError:
                continue
        value = toolchain.disk_memo("entry_points", tuple(map(tuple, stamp)),
                                     lambda: {"roots": _scan_entry_points()})
        _ep_roots = [Path(r) for r in value["roots"]]
    return _ep_roots


def prebuilt_roots() -> list[Path]:
    return [*config.prebuilt_roots(), *entry_point_roots()]


def _tvm_abi(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _cuda_runtime_loadable(major: str) -> bool:
    names = [f"libcudart.so.{major}"]
    try:
        names.append(os.path.join(toolchain.find_cuda_home(), "lib64", f"libcudart.so.{major}"))
    except ToolchainError:
        pass
    for n in names:
        try:
            ctypes.CDLL(n, mode=getattr(os, "RTLD_LAZY", 1))
            return True
        except OSError:
            continue
    return False


def _source_hashes(spec: KernelSpec) -> dict[str, str]:
    out = {}
    for rel, path in zip(spec.sources, spec.source_paths()):
        with open(path, "rb") as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def refusal(spec: KernelSpec, entry: store.Entry) -> str | None:
    """Why this artifact may not be used on this installation (None: it may)."""
    m = entry.manifest
    pre = m.get("prebuilt") or {}
    if m.get("name") != spec.name:
        return f"built for kernel {m.get('name')!r}"
    if m.get("inputs", {}).get("sources") != _source_hashes(spec):
        return "built from different sources than the installed package"
    check = key.check_deps(m.get("deps", []), m.get("absent", []), [(ROOT, str(spec.root))], only_anchor=ROOT)
    if not check.ok:
        return f"package headers differ: {check.reason}"
    local_tvm = toolchain.tvm_ffi_paths().version
    if _tvm_abi(pre.get("tvm_ffi_version", "")) != _tvm_abi(local_tvm):
        return f"tvm-ffi ABI {pre.get('tvm_ffi_version')} != installed {local_tvm}"
    if spec.is_cuda:
        want = tuple(m.get("inputs", {}).get("arch") or ())
        try:
            local = toolchain.cuda_archs()
        except ToolchainError as e:
            return f"cannot tell this machine's CUDA arch: {e}"
        if not want or not set(local) <= set(want):
            return f"built for arch {list(want)}, this machine needs {list(local)}"
        major = str(pre.get("cuda_major", ""))
        if not major or not _cuda_runtime_loadable(major):
            return f"CUDA runtime libcudart.so.{major or '?'} not found on this machine"
    mism = schema.compare(spec.functions, m.get("schemas", {}))
    if mism:
        return "schema differs: " + "; ".join(f"{k}: expected {a}, found {b}" for k, (a, b) in mism.items())
    return None


def candidates(spec: KernelSpec) -> list[store.Entry]:
    out = []
    for root in prebuilt_roots():
        out += store.all_entries(root, name=spec.name, prebuilt=True)
    return out


# -- building an artifact root -------------------------------------------------------------------
def _relocatable(manifest: dict, cuda_major: str | None) -> dict:
    """Strip machine-specific paths from a cache manifest; keep what validation needs."""
    m = json.loads(json.dumps(manifest))
    deps = m.get("deps", [])
    ext = [d for d in deps if not d["path"].startswith(ROOT)]
    m["deps"] = [d for d in deps if d["path"].startswith(ROOT)]
    m["absent"] = [a for a in m.get("absent", []) if a.startswith(ROOT)]
    m["external_deps"] = {"count": len(ext), "digest": key.canonical_hash(sorted(d["xxh3"] for d in ext))}
    inputs = m.get("inputs", {})
    inputs["tools"] = {k: {"version": (v.get("version") or "").splitlines()[-1:]}
                       for k, v in inputs.get("tools", {}).items()}
    inputs.pop("commands", None)
    m["inputs"] = inputs
    m["prebuilt"] = {
        "tvm_ffi_version": inputs.get("abi", {}).get("tvm_ffi_version"),
        "cuda_major": cuda_major,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    m.pop("host", None)
    return m


def _nvcc_major() -> str | None:
    try:
        banner = toolchain.tool_identity(toolchain.find_nvcc())["version"]
    except ToolchainError:
        return None
    import re

    found = re.search(r"release (\d+)\.", banner)
    return found.group(1) if found else None


def export_entry(entry: store.Entry, out: Path, cuda_major: str | None) -> Path:
    """Copy a cache entry into an artifact root with a relocatable manifest."""
    dest = store.key_dir(entry.manifest["name"], entry.manifest["key1"], Path(out)) / entry.entry_id
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(entry.so_path, dest / entry.manifest["so_name"])
    m = _relocatable(entry.manifest, cuda_major)
    (dest / store.MANIFEST).write_text(json.dumps(m, indent=1, sort_keys=True))
    return dest


def build_artifact_root(names: list[str] | None, archs: list[str], out: Path) -> list[dict]:
    """Build shipped kernels (per arch for CUDA ones) into a relocatable artifact root."""
    from . import loader
    from .kernels import shipped_specs

    out = Path(out).resolve()
    report = []
    saved = {k: os.environ.get(k) for k in ("KERNELCACHE_CUDA_ARCH", "KERNELCACHE_NO_BUILD", "KERNELCACHE_PREBUILT")}
    os.environ.pop("KERNELCACHE_NO_BUILD", None)
    os.environ.pop("KERNELCACHE_PREBUILT", None)
    try:
        for name, spec in shipped_specs(names).items():
            for arch in (archs or [None]) if spec.is_cuda else [None]:
                if spec.is_cuda and arch is None:
                    report.append({"name": name, "status": "failed", "reason": "CUDA kernel needs --arch"})
                    continue
                if arch:
                    os.environ["KERNELCACHE_CUDA_ARCH"] = arch
                t0 = time.monotonic()
                try:
                    _, res = loader.load_with_result(spec)
                except Exception as e:  # noqa: BLE001 - reported per kernel
                    report.append({"name": name, "status": "failed", "arch": arch, "reason": str(e)[:300],
                                   "seconds": time.monotonic() - t0})
                    continue
                entry = store.read_entry(Path(res.entry_path))
                assert entry is not None
                dest = export_entry(entry, out, _nvcc_major() if spec.is_cuda else None)
                report.append({"name": name, "status": res.status, "arch": arch, "seconds": time.monotonic() - t0,
                               "entry": str(dest.relative_to(out))})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return report
