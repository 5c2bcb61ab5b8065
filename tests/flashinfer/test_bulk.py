"""FlashInfer's bulk prebuild (``flashinfer.jit.build_jit_specs``) through the route.

FlashInfer's tests call it from their ``warmup_jit`` fixtures; users call it to prebuild. Routed,
each spec is the entry a later ``build_and_load`` hits, in any process and workspace.
"""
from __future__ import annotations

import json
from pathlib import Path

from .conftest import FiEnv

BULK = """
import json, sys
import flashinfer.jit, flashinfer.jit.core
from flashinfer.jit import activation
spec = activation.gen_act_and_mul_module("silu")
build = flashinfer.jit.core.build_jit_specs if sys.argv[-1] == "core" else flashinfer.jit.build_jit_specs
build([spec], verbose=False)
print(json.dumps({"compiled": bool(spec.is_compiled), "jit": str(spec.jit_library_path),
                  "library": str(spec.get_library_path())}))
"""


def _bulk(fi: FiEnv, ws: Path, name: str = "jit", **kw: str) -> dict:
    return json.loads(fi.run(ws, code=BULK.replace("sys.argv[-1]", repr(name)), **kw).stdout.splitlines()[-1])


def test_a_prebuilt_module_is_the_entry_a_later_build_and_load_hits(fi: FiEnv) -> None:
    variant = "-DKC_BULK_VARIANT=1"  # another key: the prebuild must build it
    before = fi.links()
    built = _bulk(fi, fi.tmp / "ws-bulk-a", extra_cuda=variant)
    assert fi.links() == before + 1  # one compile, by the route
    assert built["compiled"] and built["jit"] == built["library"] and built["jit"].startswith(str(fi.cache))
    assert not list((fi.tmp / "ws-bulk-a").rglob("*.so"))  # FlashInfer's own ninja built nothing
    # another process, another empty workspace: build_and_load hits the prebuilt entry
    loaded = fi.probe(fi.tmp / "ws-bulk-b", extra_cuda=variant)
    assert fi.links() == before + 1 and loaded["library"] == built["jit"]
    # prebuilding again (core's name this time), or prebuilding what the session built: hits only
    again = _bulk(fi, fi.tmp / "ws-bulk-c", name="core", extra_cuda=variant)
    plain = _bulk(fi, fi.tmp / "ws-bulk-d")
    assert fi.links() == before + 1
    assert again["jit"] == built["jit"] and plain["jit"] != built["jit"] and plain["jit"].startswith(str(fi.cache))


def test_a_spec_the_gate_refuses_is_prebuilt_by_flashinfer_with_one_line(fi: FiEnv) -> None:
    # its own workspace: FlashInfer's prebuild leaves a workspace whose next build_and_load
    # compiles again (its prebuild's ninja log is not the module's), so ws-own stays untouched
    ws = fi.tmp / "ws-bulk-own"
    before = fi.links()
    out = fi.run(ws, code=BULK, FLASHINFER_NVCC="$cuda_home/bin/nvcc")  # FlashInfer's default, spelled out
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("kernelcache.flashinfer")]
    assert len(lines) == 1 and "FLASHINFER_NVCC is set" in lines[0], out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["compiled"] and got["jit"].startswith(str(ws))  # FlashInfer's own file
    assert fi.links() == before + 1  # compiled by FlashInfer's ninja, not by the route
