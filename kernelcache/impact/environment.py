"""The environment as an input of test impact: what a kernel's key used outside the repository,
and the Python environment a run imported from.

Why: a kernel's cache key covers its compiler, the CUDA toolkit, tvm-ffi and every installed
header it read, so an image upgrade (a new ``flashinfer-python``) rebuilds the kernel; the
repository did not change, so a selection that looks only at git would deselect the tests that
now fail. Each kernel record therefore keeps *identities* (a kind, a label, a version, a digest,
and where to look again), and each test record the digest of its run's Python environment
(interpreter, installed distributions and versions, as pytest-testmon keeps). At selection the
current values are computed and compared; a kernel whose identity moved selects its tests with
the reason (``flashinfer-python 0.7.4 -> 0.7.5``).

An identity that cannot be computed here (no compiler on this runner) counts as moved: the
safe side. Headers outside the repository that no distribution, toolkit or tvm-ffi accounts for
(``/usr/include``) are kept with their content hashes and hashed again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any, Iterable

from ..base import process_state
from ..base.errors import ToolchainError
from ..entry.manifest import Manifest
from ..host import anchors, installed, toolchain
from ..host.anchors import ROOT

Identity = dict[str, Any]  # {"kind", "name", "version", "digest", ...}: JSON as kept in the map
ABSENT = "absent"
_TOOL_FINDERS = {"cxx": toolchain.find_cxx, "cc": toolchain.find_cc, "nvcc": toolchain.find_nvcc}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Flash_Infer.python`` = ``flash-infer-python``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


# -- distributions ----------------------------------------------------------------------------------
# Memos: sys.path (with the working directory) -> its real directories; a directory -> its
# distributions, keyed by the directory's stat (installing or removing one changes its mtime).
_roots_memo: dict[tuple[str, ...], list[str]] = {}
_dists_memo: dict[str, tuple[tuple[int, ...], list[tuple[str, str, str]]]] = {}


def _forget() -> None:
    _roots_memo.clear()
    _dists_memo.clear()


process_state.register("impact.environment", _forget)


def import_roots() -> list[str]:
    key = (os.getcwd(), *sys.path)
    got = _roots_memo.get(key)
    if got is None:
        got = []
        for p in sys.path:
            rp = os.path.realpath(p or os.getcwd())
            if rp not in got and os.path.isdir(rp):
                got.append(rp)
        _roots_memo[key] = got
    return got


def dist_dirs(root: str) -> list[tuple[str, str, str]]:
    """(canonical name, version, metadata dir) of the distributions installed in ``root``, from
    the directory names (``name-version.dist-info``: milliseconds, not reading each METADATA)."""
    try:
        st = os.stat(root)
    except OSError:
        return []
    ident = (st.st_mtime_ns, st.st_ino, st.st_size)
    hit = _dists_memo.get(root)
    if hit is not None and hit[0] == ident:
        return hit[1]
    out = _scan(root)
    _dists_memo[root] = (ident, out)
    return out


def _scan(root: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for n in names:
        if n.endswith(".dist-info"):
            name, _, version = n[: -len(".dist-info")].partition("-")
        elif n.endswith(".egg-info"):
            name, _, rest = n[: -len(".egg-info")].partition("-")
            version = rest.split("-py")[0]
        else:
            continue
        if not version:
            version = _metadata_version(os.path.join(root, n))
        out.append((canonical(name), version, os.path.join(root, n)))
    return out


def _metadata_version(meta_dir: str) -> str:
    for fname in ("METADATA", "PKG-INFO"):
        data = installed.read_bytes(os.path.join(meta_dir, fname))
        if data is not None:
            m = re.search(rb"^Version:\s*(\S+)", data, re.M)
            if m:
                return m.group(1).decode(errors="replace")
    return "?"


def python_environment() -> dict[str, Any]:
    """This interpreter and the distributions it imports from (the first on ``sys.path`` of a
    name, as ``importlib.metadata`` finds them)."""
    dists: dict[str, str] = {}
    for root in import_roots():
        for name, version, _ in dist_dirs(root):
            dists.setdefault(name, version)
    return {"python": python_version(), "dists": dict(sorted(dists.items()))}


def python_version() -> str:
    return f"{sys.implementation.name} {sys.version.split()[0]}{getattr(sys, 'abiflags', '')}"


def env_id(snapshot: dict[str, Any]) -> str:
    return digest(snapshot)


def find_dist(name: str, where: str = "") -> tuple[str, str] | None:
    """(versions, RECORD digest) of distribution ``name`` installed in ``where`` (an anchored
    directory) or else the first import root holding it; several copies in one directory (a
    ``pip install --target --upgrade`` leaves the old one) give every version, joined."""
    roots = [anchors_resolve(where)] if where else []
    roots += [r for r in import_roots() if r not in roots]
    want = canonical(name)
    for root in roots:
        found = [(v, d) for n, v, d in dist_dirs(root) if n == want]
        if found:
            versions = ", ".join(sorted(v for v, _ in found))
            records = [hashlib.sha256(installed.read_bytes(os.path.join(d, "RECORD")) or b"").hexdigest()[:32]
                       for _, d in sorted(found)]
            return versions, digest(records)
    return None


# -- anchors ----------------------------------------------------------------------------------------
def _machine() -> list[tuple[str, str]]:
    try:
        return sorted(anchors.machine_anchors(), key=lambda p: -len(p[1]))
    except ToolchainError:
        return []


def anchors_resolve(path: str) -> str:
    """An anchored path (``${SITE}/x``) on this machine (unchanged when not anchored)."""
    if path.startswith("${"):
        return anchors.resolve_anchor(path, _machine())
    return path


def _anchor(path: str) -> str:
    return anchors.anchor_path(path, _machine())


# -- kernel identities --------------------------------------------------------------------------------
def kernel_identities(man: Manifest | None, in_repository: Any = None) -> dict[str, Identity]:
    """What the key of the entry ``man`` describes used from the environment: its tools, tvm-ffi,
    the CUDA toolkit, each installed distribution whose headers it read (name, version, RECORD
    digest) and the other headers outside the repository (content hashes). ``in_repository``:
    a path -> repository path (or None) function; those deps are the repository's, not the
    environment's. {} without a manifest (the kernel's record is incomplete anyway)."""
    if man is None:
        return {}
    out: dict[str, Identity] = {}
    for name, t in sorted((man.inputs.get("tools") or {}).items()):
        out[f"tool:{name}"] = {"kind": "tool", "name": name, "version": _version_line(name, t.get("version", "")),
                               "digest": digest([t.get("version"), t.get("size"), t.get("mtime_ns")]),
                               "path": str(t.get("path", ""))}
    abi = man.inputs.get("abi") or {}
    if abi:
        out["tvm-ffi"] = {"kind": "tvm-ffi", "name": "apache-tvm-ffi", "version": str(abi.get("tvm_ffi_version")),
                          "digest": str(abi.get("libtvm_ffi_sha256", ""))[:32]}
    headers: dict[str, str] = {}
    by_root: dict[str, dict[str, str]] = {}  # import root -> {path under it: xxh3}
    roots = installed.site_roots()
    for d in man.deps:
        p = str(d.get("path", ""))
        if p.startswith(ROOT) or p.startswith(anchors.KERNELCACHE) or p.startswith(anchors.TVM_FFI):
            continue  # the repository's (and this package's: its own version), tvm-ffi's identity
        if p.startswith(anchors.CUDA):
            out["cuda"] = cuda_identity()
            continue
        real = anchors_resolve(p)
        if in_repository is not None and in_repository(real):
            continue
        root = next((r for r in roots if real.startswith(r + os.sep)), None)
        if root is not None:
            by_root.setdefault(root, {})[real[len(root) + 1:]] = p
        else:
            headers[p] = str(d.get("xxh3", ""))
    for root, rels in by_root.items():
        owners, _ = installed.listings(root, {r.split(os.sep, 1)[0] for r in rels})
        for rel, p in rels.items():
            owner = owners.get(os.path.normpath(rel))
            if owner is None:
                headers[p] = next(str(d.get("xxh3", "")) for d in man.deps if d.get("path") == p)
                continue
            name, version, _ = dist_dirs_entry(owner[0])
            if f"dist:{name}" not in out:
                found = find_dist(name, _anchor(root))
                out[f"dist:{name}"] = {"kind": "dist", "name": name, "version": version, "where": _anchor(root),
                                       "digest": found[1] if found else ""}
    if headers:
        out["headers"] = {"kind": "headers", "name": "headers outside the repository", "version": str(len(headers)),
                          "digest": digest(headers), "files": headers}
    return out


def dist_dirs_entry(meta_dir: str) -> tuple[str, str, str]:
    got = dist_dirs(os.path.dirname(meta_dir))
    return next((e for e in got if e[2] == meta_dir), (canonical(os.path.basename(meta_dir)), "?", meta_dir))


def _version_line(tool: str, banner: Any) -> str:
    """The readable line of a tool's recorded version (the identity's digest uses the whole value).
    A manifest may record it as lines (a list) rather than one banner."""
    if isinstance(banner, (list, tuple)):
        banner = "\n".join(str(x) for x in banner)
    lines = [ln.strip() for ln in str(banner or "").strip().splitlines() if ln.strip()]
    if not lines:
        return "?"
    return lines[-1] if tool == "nvcc" else lines[0]  # nvcc's release is its last line


def cuda_identity() -> Identity:
    try:
        home = toolchain.find_cuda_home()
    except ToolchainError:
        return {"kind": "cuda", "name": "CUDA toolkit", "version": ABSENT, "digest": ""}
    data = installed.read_bytes(os.path.join(home, "version.json"))
    version = "?"
    if data is not None:
        try:
            version = str(json.loads(data).get("cuda", {}).get("version", "?"))
        except (ValueError, AttributeError):
            pass
    else:
        banner = toolchain.tool_identity(os.path.join(home, "bin", "nvcc"))["version"]
        version = _version_line("nvcc", banner)
        data = banner.encode()
    return {"kind": "cuda", "name": "CUDA toolkit", "version": version, "digest": hashlib.sha256(data).hexdigest()[:32]}


def current(ident: Identity, memo_dir: Any = None) -> Identity:
    """The same identity computed here and now (version ``absent`` when it cannot be)."""
    kind = ident.get("kind")
    out = dict(ident)
    try:
        if kind == "tool":
            finder = _TOOL_FINDERS.get(str(ident["name"]))  # the one a build would take now (CXX ...)
            path = finder() if finder is not None else anchors_resolve(str(ident.get("path", "")))
            if not path:
                raise ToolchainError(f"no rule finds tool {ident['name']!r}")
            t = toolchain.tool_identity(path, memo_dir)
            out.update(version=_version_line(str(ident["name"]), t["version"]),
                       digest=digest([t["version"], t["size"], t["mtime_ns"]]))
        elif kind == "tvm-ffi":
            tvm = toolchain.tvm_ffi_paths(memo_dir)
            out.update(version=tvm.version, digest=toolchain.file_identity(tvm.lib_path, memo_dir)["sha256"][:32])
        elif kind == "cuda":
            out.update(cuda_identity())
        elif kind == "dist":
            found = find_dist(str(ident["name"]), str(ident.get("where", "")))
            out.update(version=found[0], digest=found[1]) if found else out.update(version=ABSENT, digest="")
        elif kind == "python":
            out.update(version=python_version())
        elif kind == "headers":
            now = {p: _hash(p) for p in ident.get("files", {})}
            out.update(digest=digest(now), files=now)
        else:
            out.update(version=ABSENT, digest="")
    except (ToolchainError, OSError):
        out.update(version=ABSENT, digest="")
    return out


def _hash(anchored: str) -> str:
    try:
        return toolchain.content_hash(anchors_resolve(anchored))
    except OSError:
        return ABSENT


def moved(was: Identity, now: Identity) -> str | None:
    """Why ``now`` is not ``was`` (``flashinfer-python 0.7.4 -> 0.7.5``), None when the same."""
    if was.get("version") == now.get("version") and was.get("digest") == now.get("digest"):
        return None
    name = str(was.get("name"))
    if was.get("kind") == "headers":
        files, old = now.get("files") or {}, was.get("files") or {}
        diff = sorted(p for p in old if files.get(p) != old[p])
        return f"header {diff[0]} changed" + (f" (and {len(diff) - 1} more)" if len(diff) > 1 else "") if diff \
            else "headers outside the repository changed"
    if was.get("version") != now.get("version"):
        return f"{name} {was.get('version')} -> {now.get('version')}"
    return f"{name} {was.get('version')}: other bytes (same version, another build or install)"


def kernel_moved(identities: dict[str, Identity], memo_dir: Any = None,
                 cache: dict[str, Identity] | None = None) -> str | None:
    """The first identity of a kernel that moved, as a reason; ``cache``: current values per
    identity key already computed (tools and distributions are shared by kernels)."""
    for key, was in sorted(identities.items()):
        ck = key if key != "headers" else f"headers:{was.get('digest')}"
        now = cache.get(ck) if cache is not None else None
        if now is None:
            now = current(was, memo_dir)
            if cache is not None:
                cache[ck] = now
        why = moved(was, now)
        if why:
            return why
    return None


def dist_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """Distribution -> ``name 1.0 -> 1.1`` (``added``, ``removed``) between two environments."""
    a, b = old.get("dists") or {}, new.get("dists") or {}
    out = {}
    for n in sorted(set(a) | set(b)):
        if a.get(n) != b.get(n):
            out[n] = f"{n} {a.get(n, 'not installed')} -> {b.get(n, 'not installed')}"
    return out


def union_changes(snapshots: Iterable[dict[str, Any]], now: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in snapshots:
        for n, why in dist_changes(s, now).items():
            out.setdefault(n, why)
    return out
