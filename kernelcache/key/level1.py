"""The level-1 key: everything knowable before compiling, hashed from the plan that will run.

Source bytes with root-relative ids, the fully expanded command lines (machine prefixes
anchored), toolchain identity, arch, ABI and allow-listed environment. sha256 over canonical
JSON: never ``hash()``, reprs or timestamps, so every interpreter computes the same key.
``diff_inputs`` says why two level-1 keys differ (the miss reason).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Mapping

from ..base import basis
from ..base.records import FrozenRecord, field
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..host import native, toolchain
from ..host.anchors import anchor_path, anchor_text, anchors_for
from .plan import BuildPlan

# 4: files outside the root that move with it are named relative to it (anchors.moving_dirs);
# entries of format 3 recorded them by absolute path, which a moved checkout must not trust
# 5: the CUDA toolkit and Python's include dir are anchors (${CUDA}, ${PYINC}) in command lines,
# tool paths and recorded headers; format 4 named them by absolute path
KEY_FORMAT = 5


def canonical_hash(obj) -> str:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.sha256(data).hexdigest()


def source_hashes(spec: KernelSpec) -> dict[str, str]:
    """sha256 of every source's bytes by its root-relative id (the one rule for source identity).
    Each source's stat is noted when it held across the read (``basis``: a source written
    meanwhile is hashed, never witnessed)."""
    out: dict[str, str] = {}
    for rel, path in zip(map(str, spec.sources), spec.source_paths()):
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            out[rel] = hashlib.sha256(f.read()).hexdigest()
        after = os.stat(path)
        if basis.fields(before) == basis.fields(after):
            basis.note(path, after)
        else:
            basis.spoil(f"source {path} changed while it was read")
    return out


def tvm_abi(version: str | None) -> str:
    """tvm-ffi's ABI is stable within a minor series (0.1.x)."""
    return ".".join((version or "").split(".")[:2])


def extra_inputs(spec: KernelSpec, kind_inputs: Mapping[str, str]) -> dict:
    """The kind's facts and extra ABI facts, present only when there are any (so the keys of
    tvm-ffi modules stay what they were before kinds existed)."""
    out: dict = dict(kind_inputs)
    if spec.abi:
        out["extra_abi"] = dict(spec.abi)
    return out


class Level1(FrozenRecord):
    """The level-1 key of a plan and the inputs it covers."""

    key: str
    inputs: dict  # clear-text inputs, stored in the manifest for `explain`
    source_hashes: dict[str, str] = field(default_factory=dict)


def level1(plan: BuildPlan, settings: Settings, sources: dict[str, str] | None = None) -> Level1:
    """The level-1 key of ``plan``; ``sources``: its source hashes when the caller has them."""
    tvm = toolchain.tvm_ffi_paths(settings.memo_dir)  # first: with the on-disk memo (anchors ask too)
    anchors = anchors_for(plan)
    sources = source_hashes(plan.spec) if sources is None else sources
    cmds = plan.key_commands()
    cmds = {k: ([[anchor_text(a, anchors) for a in c] for c in v] if k == "compile"
                else [anchor_text(a, anchors) for a in v]) for k, v in cmds.items()}
    tools = {  # nvcc as ${CUDA}/bin/nvcc: its identity is the banner, size and mtime, not where it sits
        k: {"path": anchor_path(v["path"], anchors), "version": v["version"], "size": v["size"],
            "mtime_ns": v["mtime_ns"]}
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
        "env": {**toolchain.env_inputs(), **({"KERNELCACHE_CACHE_BUSTER": settings.cache_buster}
                                             if settings.cache_buster else {})},
        "functions": dict(plan.spec.schemas),
        **extra_inputs(plan.spec, plan.kind_inputs),
    }
    if plan.links_tvm_ffi:  # a kind that never links tvm-ffi (torch extensions) is not re-keyed by its bump
        inputs["abi"] = {"tvm_ffi_version": tvm.version,
                         "libtvm_ffi_sha256": toolchain.file_identity(tvm.lib_path, settings.memo_dir)["sha256"]}
    nat = native.key_inputs(plan.cxx, (plan.spec.cflags, plan.spec.cuda_cflags), settings.memo_dir)
    if nat is not None:  # what -march=native expands to here, and the CPU features it needs
        inputs["native"] = nat
    return Level1(key=canonical_hash(inputs), inputs=inputs, source_hashes=sources)


def _dict_diff(a: dict, b: dict) -> str:
    """Only the entries that differ (two whole dicts that differ in one hash read as a riddle)."""
    def short(v: object) -> str:
        t = "unset" if v is None else str(v)
        return t[:12] + "..." if len(t) == 64 and all(c in "0123456789abcdef" for c in t) else t

    return "; ".join(f"{k} {short(a.get(k))} -> {short(b.get(k))}" for k in sorted(set(a) | set(b))
                     if a.get(k) != b.get(k))


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
        elif k in ("abi", "extra_abi", "env") and isinstance(a, dict) and isinstance(b, dict):
            what = "environment" if k == "env" else "ABI"
            out.append(f"{what} changed: {_dict_diff(a, b)}")
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
