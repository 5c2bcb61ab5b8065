"""explain(spec): what the key is made of and what a load would do — without doing any of it.

Read-only by contract: no dlopen, no quarantine, no stat-cache refresh, no used stamps, no
directories created. Tools are still identified (that is what the key is made of); their
identities come from the on-disk memo when it exists.
"""
from __future__ import annotations

from typing import Any

from . import anchors, gpu, key, kinds, level1, toolchain, validate
from . import manifest as manifest_mod
from .errors import ToolchainError
from .layout import BUILT
from .settings import Settings, resolve
from .spec import KernelSpec
from .storage import prebuilt
from .storage.local import LocalStore


def explain(spec: KernelSpec, settings: Settings | None = None) -> dict[str, Any]:
    """Status (prebuilt | hit | fetched | miss), the level-1 inputs, and every refusal with its reason."""
    s = resolve(settings)
    store = LocalStore(s)
    tvm_version = toolchain.tvm_ffi_paths().version
    inst = validate.Installation(tvm_version, anchors.anchors_of(spec), s.cuda_arch)
    pre = []
    for entry in prebuilt.candidates(spec.name, s):
        rej = validate.installation_refusal(spec, entry.manifest, inst, prebuilt.cuda_runtime_loadable, False)
        if rej is None:
            rej = validate.before_dlopen(spec, entry.manifest, entry.so_path, check_sha=True)
        pre.append({"entry": str(entry.path), "usable": rej is None, "reason": str(rej or "")})
    out: dict[str, Any] = {"name": spec.name, "key1": None, "inputs": {}, "status": "miss", "entry": None,
                           "reason": "", "refused": [f"prebuilt {p['entry']}: {p['reason']}" for p in pre
                                                     if not p["usable"]], "prebuilt": pre}
    usable = next((p for p in pre if p["usable"]), None)
    if usable and not s.rebuild:
        out.update(status="prebuilt", entry=usable["entry"])
    try:
        plan = kinds.make_plan(spec, s)
        l1 = level1.level1(plan, s)
    except ToolchainError as e:
        out["reason"] = f"no toolchain: {e}"
        return _fetched(out, spec, s, store, inst)
    out.update(key1=l1.key, inputs=l1.inputs)
    anchored = anchors.anchors_for(plan)
    first_reason = ""
    for entry in store.candidates(spec.name, l1.key):
        check = key.check_deps(entry.manifest.deps, entry.manifest.absent, anchored, entry.stat_cache())
        rej = None if check.ok else check.reason
        rej = rej or validate.cpu_refusal(entry.manifest)
        rej = rej or validate.before_dlopen(spec, entry.manifest, entry.so_path, check_sha=True)
        if rej is None:
            if out["status"] == "miss":
                out.update(status="hit", entry=str(entry.path))
            return out
        first_reason = first_reason or str(rej)
        out["refused"].append(f"{entry.path}: {rej}")
    if out["status"] != "miss":
        return out
    out["reason"] = first_reason or nearest_diff(store, spec.name, l1)
    return _fetched(out, spec, s, store, inst)


def _fetched(out: dict, spec: KernelSpec, s: Settings, store: LocalStore, inst: validate.Installation) -> dict:
    if out["status"] != "miss":
        return out
    try:
        archs = gpu.target_archs(s.cuda_arch) if spec.is_cuda else ()
    except ToolchainError:
        return out
    skey = kinds.source_key(spec, archs, inst.tvm_ffi_version, s)
    out["source_key"] = skey
    for entry in store.fetched(spec.name, skey):
        rej = validate.installation_refusal(spec, entry.manifest, inst, prebuilt.cuda_runtime_loadable, True)
        if rej is None:
            out.update(status="fetched", entry=str(entry.path))
            return out
        out["refused"].append(f"fetched {entry.path}: {rej}")
    return out


def nearest_diff(store: LocalStore, name: str, l1: level1.Level1) -> str:
    """Why there is no entry: diff vs the most recently used manifest of the same kernel."""
    infos = [i for i in store.infos(name) if i.area == BUILT]
    if not infos:
        return "no cached entry for this kernel"
    latest = manifest_mod.read(max(infos, key=lambda i: i.last_used).path)
    diffs = level1.diff_inputs(latest.inputs if latest else {}, l1.inputs)
    return "; ".join(diffs) if diffs else "no entry for this build key"
