"""Issue 45, item 1, through FlashInfer: a prebuilt root is used only for the build it holds.

A custom op made by FlashInfer's own ``gen_jit_spec`` returns the ``LLM_SCALE_FACTOR`` it was
compiled with. ``kernelcache build --flashinfer`` exports it built with ``-DLLM_SCALE_FACTOR=2``
(compiled on this CPU box for sm_90a). Then, on a host with a compiler and on one without:

* the same module: served from the root (2), nothing compiled;
* ``FLASHINFER_EXTRA_CUDAFLAGS=-DLLM_SCALE_FACTOR=3`` (the serving host's flags): never the
  root's 2; with a compiler it is built here (3, and 3 again when recalled in a later process),
  without one the error names the flag;
* the op's code asking for ``-DLLM_SCALE_FACTOR=5``: the same, the error naming both defines;
* ``explain`` agrees: a refused root entry is not "prebuilt".
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import FiEnv

OP = '''
from pathlib import Path
from flashinfer.jit.core import gen_jit_spec

SRC = Path(__file__).parent / "kc_scale_src" / "scale.cu"


def gen_scale_module(factor):
    return gen_jit_spec("kc_llm_scale", [SRC], extra_cuda_cflags=[f"-DLLM_SCALE_FACTOR={factor}"])
'''
CU = """\
#include <tvm/ffi/function.h>
#ifndef LLM_SCALE_FACTOR
#define LLM_SCALE_FACTOR 1
#endif
int64_t llm_scale_factor() { return LLM_SCALE_FACTOR; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(llm_scale_factor, llm_scale_factor);
"""
PROBE = """
import json
from kc_scale_op import gen_scale_module
spec = gen_scale_module({factor})
out = {{}}
try:
    mod = spec.build_and_load()
    out.update(value=mod.llm_scale_factor(), library=str(spec.get_library_path()))
except Exception as e:
    out.update(error=type(e).__name__, message=str(e))
import sys
out["recalled"] = "kernelcache.lookup.loader" not in sys.modules
import kernelcache as kc
from kernelcache.flashinfer import _spec
from kernelcache.base.settings import Settings
ks, s, _ = _spec.kernel_spec(spec, Settings.from_env())
info = kc.explain(ks, s)
out.update(status=info["status"], prebuilt=info["prebuilt"])
print(json.dumps(out))
"""
BUILD = "import sys; from kernelcache.cli import main; raise SystemExit(main({argv!r}))"
SCALE = "kc_scale_op:gen_scale_module(2)"
FLAG_3 = "-DLLM_SCALE_FACTOR=3"


@pytest.fixture(scope="module")
def op(fi: FiEnv) -> Path:
    """The directory holding the custom op's module (put on the hosts' PYTHONPATH)."""
    d = fi.tmp / "scale-op"
    (d / "kc_scale_src").mkdir(parents=True)
    (d / "kc_scale_op.py").write_text(OP)
    (d / "kc_scale_src" / "scale.cu").write_text(CU)
    return d


@pytest.fixture(scope="module")
def root(fi: FiEnv, op: Path) -> Path:
    """The op built with LLM_SCALE_FACTOR=2 and exported by ``kernelcache build --flashinfer``."""
    out = fi.tmp / "scale-root"
    p = fi.run(fi.tmp / "ws-a", code=BUILD.format(argv=["build", "--flashinfer", SCALE, "--out", str(out)]),
               PYTHONPATH=_path(fi, op))
    assert "kc_llm_scale" in p.stdout and "failed" not in p.stdout, p.stdout + p.stderr[-3000:]
    [m] = out.glob("v1/entries/kc_llm_scale/*/*/manifest.json")
    flags = json.loads(m.read_text())["skey_inputs"]["flags"][1]
    assert "-DLLM_SCALE_FACTOR=2" in flags and FLAG_3 not in flags
    return out


def _path(fi: FiEnv, op: Path) -> str:
    return f"{op}:{fi.env(fi.tmp)['PYTHONPATH']}"


def _host(fi: FiEnv, op: Path, root: Path, name: str, compiler: bool, disable_jit: bool = True) -> dict[str, str]:
    """A serving host: an empty cache of its own and ``root``; without a compiler: no nvcc on
    PATH, no C++ compiler, and (``disable_jit``) FLASHINFER_DISABLE_JIT."""
    host = fi.tmp / name
    env = {"KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_LOCK_DIR": str(host / "locks"),
           "KERNELCACHE_PREBUILT": str(root), "PYTHONPATH": _path(fi, op)}
    if not compiler:
        env.update(CXX=str(host / "no-such-compiler"),
                   PATH=":".join(d for d in fi.env(host)["PATH"].split(":") if "cuda" not in d))
        if disable_jit:
            env["FLASHINFER_DISABLE_JIT"] = "1"
    return env


def _probe(fi: FiEnv, env: dict[str, str], factor: int = 2, extra_cuda: str = "") -> dict:
    ws = Path(env["KERNELCACHE_DIR"]).parent / "ws"
    p = fi.run(ws, code=PROBE.format(factor=factor), extra_cuda=extra_cuda, **env)
    return json.loads(p.stdout.splitlines()[-1])


def _refused(out: dict) -> str:
    [pre] = out["prebuilt"]
    assert not pre["usable"] and out["status"] != "prebuilt", out
    return pre["reason"]


def test_with_a_compiler_a_flag_change_is_built_here_never_served_from_the_root(fi: FiEnv, op: Path, root: Path):
    env = _host(fi, op, root, "scale-host-cc", compiler=True)
    before = fi.links()
    same = _probe(fi, env)
    assert (same["value"], same["status"]) == (2, "prebuilt") and same["library"].startswith(str(root)), same
    assert fi.links() == before
    changed = _probe(fi, env, extra_cuda=FLAG_3)
    assert changed["value"] == 3 and not changed["library"].startswith(str(root)), changed
    assert fi.links() == before + 1
    assert "this spec has ['-DLLM_SCALE_FACTOR=3']" in _refused(changed)
    again = _probe(fi, env, extra_cuda=FLAG_3)  # a later process: recalled, or a hit, never the root's
    assert again["value"] == 3 and not again["library"].startswith(str(root)) and fi.links() == before + 1, again
    back = _probe(fi, env)
    assert (back["value"], back["status"]) == (2, "prebuilt") and back["library"].startswith(str(root)), back
    code = _probe(fi, env, factor=5)  # the op's own code asks for another define
    assert code["value"] == 5 and fi.links() == before + 2, code
    assert "built with ['-DLLM_SCALE_FACTOR=2'], this spec has ['-DLLM_SCALE_FACTOR=5']" in _refused(code)


def test_without_a_compiler_a_flag_change_is_an_error_naming_the_flag(fi: FiEnv, op: Path, root: Path):
    env = _host(fi, op, root, "scale-host-bare", compiler=False)
    before = fi.links()
    same = _probe(fi, env)
    assert (same["value"], same["status"]) == (2, "prebuilt") and same["library"].startswith(str(root)), same
    changed = _probe(fi, env, extra_cuda=FLAG_3)
    assert "value" not in changed and changed["error"] == "FlashInferCacheMiss", changed
    assert "cuda_cflags: built with [], this spec has ['-DLLM_SCALE_FACTOR=3']" in changed["message"], changed
    assert "this spec has ['-DLLM_SCALE_FACTOR=3']" in _refused(changed)
    code = _probe(fi, env, factor=5)
    assert "value" not in code, code
    assert "cuda_cflags: built with ['-DLLM_SCALE_FACTOR=2'], this spec has ['-DLLM_SCALE_FACTOR=5']" \
        in code["message"], code
    assert fi.links() == before


def test_without_a_compiler_and_jit_allowed_the_toolchain_error_names_the_flag(fi: FiEnv, op: Path, root: Path):
    env = _host(fi, op, root, "scale-host-bare-jit", compiler=False, disable_jit=False)
    before = fi.links()
    changed = _probe(fi, env, extra_cuda=FLAG_3)
    assert changed.get("error") == "ToolchainError", changed
    assert "refused: prebuilt" in changed["message"] and "this spec has ['-DLLM_SCALE_FACTOR=3']" in changed["message"]
    assert fi.links() == before


def test_a_companion_wheel_of_the_root_is_admitted_by_the_same_key(fi: FiEnv, op: Path, root: Path):
    import zipfile

    from kernelcache.export.roots import pack_wheel

    whl = pack_wheel(root, fi.tmp / "scale-dist", "scale_test")
    site = fi.tmp / "scale-wheel-site"
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    env = _host(fi, op, root, "scale-host-wheel", compiler=False)
    env["KERNELCACHE_PREBUILT"] = ""
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{site}"
    same = _probe(fi, env)
    assert same["value"] == 2 and same["library"].startswith(str(site / "kernelcache_prebuilt_scale_test")), same
    changed = _probe(fi, env, extra_cuda=FLAG_3)
    assert changed.get("error") == "FlashInferCacheMiss" and FLAG_3 in changed["message"], changed
