"""Cache keys: level 1 (predicted before compiling) and level 2 (recorded from the compiler).

Level 1 hashes everything knowable before compiling: source bytes with root-relative ids, the
fully expanded command lines, toolchain identity, arch, ABI and allow-listed environment.
Level 2 is the dependency manifest: every file the compiler actually read (from ``-MD``
depfiles, which unlike ``-MMD`` keep ``-isystem`` headers) with its content hash, plus
"absent" probes so a new header that would shadow an old one is a miss. Stat fields are only
a fast pre-check; bytes decide. Keys are sha256 over canonical JSON: never ``hash()``,
reprs or timestamps, so every interpreter computes the same key.
"""
from __future__ import annotations

import hashlib
import json
import os
import re

from . import native, toolchain
from .plan import ROOT, BuildPlan
from .settings import Settings
from .spec import KernelSpec

KEY_FORMAT = 3
TVM_FFI = "${TVM_FFI}"
SITE = "${SITE}"  # site-packages: header-only dependencies (FlashInfer) relocate with the venv


def canonical_hash(obj) -> str:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.sha256(data).hexdigest()


# -- anchors ---------------------------------------------------------------------------------
def anchors_of(spec: KernelSpec) -> list[tuple[str, str]]:
    """(anchor, realpath prefix), longest prefix first.

    ``${SITE}`` is the site-packages directory holding tvm-ffi (where header-only packages
    such as FlashInfer live too); taken from tvm-ffi's path because asking sysconfig costs
    milliseconds per process.
    """
    tvm_dir = toolchain.tvm_ffi_paths().package_dir
    pairs = [(ROOT, str(spec.root)), (TVM_FFI, tvm_dir), (SITE, os.path.dirname(tvm_dir))]
    return sorted(pairs, key=lambda p: -len(p[1]))


def anchors_for(plan: BuildPlan) -> list[tuple[str, str]]:
    return anchors_of(plan.spec)


def anchor_path(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path == prefix or path.startswith(prefix + os.sep):
            return name + path[len(prefix):]
    return path


def resolve_anchor(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path.startswith(name):
            return prefix + path[len(name):]
    return path


_BOUNDARY = set("/:;,= \t")


def _anchor_text(text: str, anchors: list[tuple[str, str]]) -> str:
    """Anchor every occurrence of a prefix that ends at a path boundary (not /a in /abc)."""
    for name, prefix in anchors:
        start = 0
        while True:
            i = text.find(prefix, start)
            if i < 0:
                break
            j = i + len(prefix)
            if j == len(text) or text[j] in _BOUNDARY:
                text = text[:i] + name + text[j:]
                start = i + len(name)
            else:
                start = j
    return text


# -- sources -----------------------------------------------------------------------------------
def source_hashes(spec: KernelSpec) -> dict[str, str]:
    """sha256 of every source's bytes by its root-relative id (the one rule for source identity)."""
    out = {}
    for rel, path in zip(spec.sources, spec.source_paths()):
        with open(path, "rb") as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def tvm_abi(version: str | None) -> str:
    """tvm-ffi's ABI is stable within a minor series (0.1.x)."""
    return ".".join((version or "").split(".")[:2])


def source_key(spec: KernelSpec, archs: tuple[str, ...], tvm_version: str, settings: Settings) -> str:
    """A key computable without any tool: what fleet hosts index shared entries by.

    Serving hosts may have no compiler, so the remote cannot be indexed by the level-1 key (it
    hashes tool identities). This key only narrows the search; every candidate is then
    validated against this installation (sources, headers, ABI, arch, schemas, bytes).
    """
    def where(d: str) -> str:
        p = str(spec.abspath(d))
        root = str(spec.root)
        return ROOT + p[len(root):] if p == root or p.startswith(root + os.sep) else "<external>"

    flags = [list(spec.cflags), list(spec.cuda_cflags), list(spec.ldflags)]
    data = {
        "format": KEY_FORMAT, "name": spec.name, "backend": spec.backend,
        "sources": source_hashes(spec),
        "include_dirs": [where(d) for d in spec.include_dirs],
        "system_include_dirs": [where(d) for d in spec.system_include_dirs],
        "flags": flags,
        "arch": list(archs) if spec.is_cuda else [], "tvm_ffi_abi": tvm_abi(tvm_version),
        "functions": dict(spec.functions), "buster": settings.cache_buster,
        **({"native_cpu": sorted(native.cpu_features())} if _has_native(spec) else {}),
    }
    data.update(_kind_inputs(spec))
    if spec.verbatim_flags:
        # Foreign kinds carry complete flag lists with install paths (torch's include and
        # library dirs): anchored, so hosts whose venvs sit elsewhere share the index.
        anchors = anchors_of(spec)
        data["flags"] = [[_anchor_text(f, anchors) for f in fl] for fl in flags]
        data["include_dirs"] = [_anchor_text(str(spec.abspath(d)), anchors) for d in spec.include_dirs]
        data["system_include_dirs"] = [_anchor_text(str(spec.abspath(d)), anchors)
                                       for d in spec.system_include_dirs]
    return canonical_hash(data)


def _kind_inputs(spec: KernelSpec) -> dict:
    """Kind and extra ABI facts, present only when they differ from the defaults (so the keys of
    tvm-ffi modules stay what they were before kinds existed)."""
    out: dict = {}
    if spec.kind != "tvm_ffi":
        out["kind"] = spec.kind
    if spec.abi:
        out["extra_abi"] = dict(spec.abi)
    if spec.complete_flags:
        out["complete_flags"] = True
    return out


def _has_native(spec: KernelSpec) -> bool:
    """``-march=native`` and friends: the same string builds different code on another CPU, so
    the tool-free source key names this CPU (its feature flags) for such a spec."""
    return bool(native.native_flags(spec.cflags, spec.cuda_cflags))


# -- level 1 -----------------------------------------------------------------------------------
class Level1:
    """The level-1 key of a plan and the inputs it covers (a plain class: on every load's path)."""

    __slots__ = ("key", "inputs", "source_hashes")

    def __init__(self, key: str, inputs: dict, source_hashes: dict[str, str] | None = None) -> None:
        self.key = key
        self.inputs = inputs  # clear-text inputs, stored in the manifest for `explain`
        self.source_hashes = {} if source_hashes is None else source_hashes


def level1(plan: BuildPlan, settings: Settings) -> Level1:
    anchors = anchors_for(plan)
    tvm = toolchain.tvm_ffi_paths(settings.memo_dir)
    sources = source_hashes(plan.spec)
    cmds = plan.key_commands()
    cmds = {k: ([[_anchor_text(a, anchors) for a in c] for c in v] if k == "compile"
                else [_anchor_text(a, anchors) for a in v]) for k, v in cmds.items()}
    tools = {
        k: {"path": v["path"], "version": v["version"], "size": v["size"], "mtime_ns": v["mtime_ns"]}
        for k, v in sorted(plan.tools.items())
    }
    inputs = {
        "format": KEY_FORMAT,
        "name": plan.spec.name,
        "backend": plan.spec.backend,
        "sources": sources,
        "commands": cmds,
        "tools": tools,
        "arch": list(plan.archs),
        "abi": {
            "tvm_ffi_version": tvm.version,
            "libtvm_ffi_sha256": toolchain.file_identity(tvm.lib_path, settings.memo_dir)["sha256"],
        },
        "env": {**toolchain.env_inputs(), **({"KERNELCACHE_CACHE_BUSTER": settings.cache_buster}
                                             if settings.cache_buster else {})},
        "functions": dict(plan.spec.functions),
        **_kind_inputs(plan.spec),
    }
    nat = native.key_inputs(plan.cxx, (plan.spec.cflags, plan.spec.cuda_cflags), settings.memo_dir)
    if nat is not None:  # what -march=native expands to here, and the CPU features it needs
        inputs["native"] = nat
    return Level1(key=canonical_hash(inputs), inputs=inputs, source_hashes=sources)


def diff_inputs(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two level-1 input sets (for `explain`)."""
    out: list[str] = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if k == "sources" and isinstance(a, dict) and isinstance(b, dict):
            for s in sorted(set(a) | set(b)):
                if s not in a:
                    out.append(f"source {s} added")
                elif s not in b:
                    out.append(f"source {s} removed")
                elif a[s] != b[s]:
                    out.append(f"source {s} changed")
        elif k == "tools" and isinstance(a, dict) and isinstance(b, dict):
            for t in sorted(set(a) | set(b)):
                ta, tb = a.get(t) or {}, b.get(t) or {}
                if ta.get("path") != tb.get("path"):
                    out.append(f"tool {t} changed: {ta.get('path')} -> {tb.get('path')}")
                elif ta.get("version") != tb.get("version"):
                    va = (ta.get("version") or "").splitlines()[:1]
                    vb = (tb.get("version") or "").splitlines()[:1]
                    out.append(f"tool {t} version changed: {va} -> {vb}")
                elif ta != tb:
                    out.append(f"tool {t} binary changed (size/mtime) at {tb.get('path')}")
        elif k == "commands" and isinstance(a, dict) and isinstance(b, dict):
            fa = json.dumps(a, sort_keys=True)
            fb = json.dumps(b, sort_keys=True)
            if fa != fb:
                sa = {x for c in a.get("compile", []) for x in c} | set(a.get("link", []))
                sb = {x for c in b.get("compile", []) for x in c} | set(b.get("link", []))
                added, removed = sorted(sb - sa), sorted(sa - sb)
                detail = "; ".join(
                    ([f"added {added}"] if added else []) + ([f"removed {removed}"] if removed else [])
                ) or "order changed"
                out.append(f"compile/link flags changed: {detail}")
        elif k == "arch":
            out.append(f"target arch changed: {a} -> {b}")
        elif k == "abi":
            out.append(f"ABI changed: {a} -> {b}")
        elif k == "env":
            out.append(f"environment changed: {a} -> {b}")
        elif k == "functions":
            out.append("expected function schemas changed")
        elif k == "native":
            out.append(f"-march=native expands differently on this CPU: {(a or {}).get('expanded', [])[:3]}... "
                       f"-> {(b or {}).get('expanded', [])[:3]}...")
        elif k == "extra_abi":
            out.append(f"ABI changed: {a} -> {b}")
        else:
            out.append(f"{k} changed: {a!r} -> {b!r}")
    return out


# -- level 2 -----------------------------------------------------------------------------------
_DEP_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


def parse_depfile(text: str) -> list[str]:
    """Parse a make-style depfile (gcc -MD / nvcc -MD) into the list of prerequisites."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    deps: list[str] = []
    for line in text.splitlines():
        idx = line.find(": ")  # target ends at the first ": " (paths contain no ": ")
        if idx < 0:
            if ":" not in line or line.rstrip().endswith(":"):
                continue
            idx = line.find(":")
        for tok in _DEP_TOKEN.findall(line[idx + 1:]):
            deps.append(tok.replace("\\ ", " ").replace("\\#", "#").replace("$$", "$"))
    return deps


def _stat_tuple(st: os.stat_result) -> list[int]:
    # ctime cannot be set back by a user, so an edit with a restored mtime still re-hashes.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def record_deps(plan: BuildPlan, dep_paths: list[str], exclude_dir: str) -> tuple[list[dict], list[str]]:
    """Hash every file the compiler read and compute absent probes for shadowing."""
    anchors = anchors_for(plan)
    source_set = {s.path for s in plan.sources}
    seen: dict[str, dict] = {}
    absent: set[str] = set()
    inc_dirs = plan.include_dirs
    dir_real: dict[str, str] = {}  # realpath per directory: ~30 dirs instead of ~300 files
    for raw in dep_paths:
        d, base = os.path.split(os.path.abspath(raw))
        rd = dir_real.get(d)
        if rd is None:
            rd = dir_real[d] = os.path.realpath(d)
        p = os.path.join(rd, base)
        if os.path.islink(p):
            p = os.path.realpath(p)
        if p in seen or p in source_set or p.startswith(exclude_dir + os.sep):
            continue
        try:
            st = os.stat(p)
            digest = toolchain.content_hash(p)
        except OSError:
            continue
        seen[p] = {"path": anchor_path(p, anchors), "xxh3": digest, "stat": _stat_tuple(st)}
        for k, d in enumerate(inc_dirs):
            if p.startswith(d + os.sep):
                rel = p[len(d) + 1:]
                for earlier in inc_dirs[:k]:
                    probe = os.path.join(earlier, rel)
                    if not os.path.exists(probe):
                        absent.add(anchor_path(probe, anchors))
                break
    deps = sorted(seen.values(), key=lambda d: d["path"])
    return deps, sorted(absent)


def entry_id(key1: str, deps: list[dict], absent: list[str]) -> str:
    return canonical_hash([key1, [[d["path"], d["xxh3"]] for d in deps], absent])[:32]


class DepCheck:
    """Did the recorded dependencies hold (a plain class: on every load's path)."""

    __slots__ = ("ok", "reason", "refreshed")

    def __init__(self, ok: bool, reason: str = "", refreshed: dict[str, list[int]] | None = None) -> None:
        self.ok, self.reason = ok, reason
        self.refreshed = {} if refreshed is None else refreshed  # path -> new stat (bytes equal)


def check_deps(deps: list[dict], absent: list[str], anchors: list[tuple[str, str]],
               stat_cache: dict[str, list[int]] | None = None, only_anchor: str | None = None,
               tolerate_missing_external: bool = False) -> DepCheck:
    """Validate recorded dependencies: equal stat -> trusted; otherwise re-hash; bytes decide.

    ``tolerate_missing_external``: for entries built on another host, an un-anchored header
    (a toolkit's) that this host does not have is skipped; one it has must match.
    """
    refreshed: dict[str, list[int]] = {}
    stat_cache = stat_cache or {}
    for d in deps:
        if only_anchor and not d["path"].startswith(only_anchor):
            continue
        p = resolve_anchor(d["path"], anchors)
        try:
            st = os.stat(p)
        except OSError:
            if tolerate_missing_external and not d["path"].startswith("${"):
                continue
            return DepCheck(False, f"header {d['path']} no longer exists")
        cur = _stat_tuple(st)
        if cur == d["stat"] or cur == stat_cache.get(d["path"]):
            continue
        try:
            digest = toolchain.content_hash(p)
        except OSError as e:
            return DepCheck(False, f"header {d['path']} unreadable: {e}")
        if digest != d.get("xxh3"):
            return DepCheck(False, f"header {d['path']} changed (content hash differs)")
        refreshed[d["path"]] = cur
    for a in absent:
        if (only_anchor and not a.startswith(only_anchor)) or (tolerate_missing_external and not a.startswith("${")):
            continue
        if os.path.exists(resolve_anchor(a, anchors)):
            return DepCheck(False, f"new header {a} shadows the one used before")
    return DepCheck(True, refreshed=refreshed)
