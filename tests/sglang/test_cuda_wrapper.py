"""Issue 41: a header-only CUDA module (SGLang's speculative tree kernels: ``cuda_files`` and
``cuda_wrappers``, SGLang's generated ``cuda.cu`` wrapper) through the route on this CPU box, for
sm_90a (SGLang's ``override_jit_cuda_arch``; no GPU needed to compile, link or load): built once
from the wrapper's snapshot with SGLang's nvcc lines, its exports there, then a hit. Before, the
route kept the wrapper's export names as functions and refused the fresh build (SGLang compiles
without tvm-ffi's schema metadata, so every export read as missing)."""
from __future__ import annotations

import json
import shutil

import pytest

from .conftest import SgEnv

TREE = """
import json
from sglang.kernels.jit.utils import override_jit_cuda_arch
from sglang.kernels.ops.speculative import tree
import kernelcache.sglang as route
with override_jit_cuda_arch(9, 0):
    m = tree._jit_tree_module()
print(json.dumps({"fn": m.verify_tree_greedy is not None,
                  "so": str(route.loaded_path("sgl_kernel_jit_speculative_tree") or "")}))
"""


def test_a_header_only_cuda_module_builds_from_its_wrapper_then_hits(sg: SgEnv) -> None:
    if not shutil.which("nvcc") and not __import__("os").path.exists("/usr/local/cuda/bin/nvcc"):
        pytest.skip("nvcc not found")
    before = sg.links()
    a = json.loads(sg.run(code=TREE, CUDA_HOME="/usr/local/cuda").stdout.splitlines()[-1])
    assert a["fn"] and a["so"].startswith(str(sg.cache)) and sg.links() == before + 1, a
    assert list((sg.cache / "v1" / "inline").glob("sgl_sgl_kernel_jit_speculative_tree/*/cuda.cu"))
    b = json.loads(sg.run(code=TREE, CUDA_HOME="/usr/local/cuda").stdout.splitlines()[-1])
    assert b == a and sg.links() == before + 1
