"""A recalled call re-stats exactly what the full load's answer rested on, as the load returned it
(``WarmResult.rested_on``, noted by each check on the way: ``kernelcache.base.basis``), not a list
gathered again afterwards by hand.

Each test provokes a fact that a list gathered after the load missed: a binary replaced under a
process that had already admitted it (the memo named the new bytes, unverified), and an ``nvcc``
that appears earlier on ``PATH`` (the toolkit the full path would key by).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support import make_project

LOAD = """
import json, sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name={name!r}, sources=[{src!r}], root=Path({base!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int], int]"}})
try:
    mod = kc.load(spec)
    out = dict(value=mod.add(1, 2))
except kc.KernelCacheError as e:
    out = dict(error=type(e).__name__)
out["recalled"] = "kernelcache.lookup.loader" not in sys.modules
print(json.dumps(out))
"""


def _load(kc_env, base: Path, name: str = "adder", src: str = "add.cc", **env: str) -> dict:
    out = kc_env.run_py(LOAD.format(name=name, src=src, base=str(base)), cwd=kc_env.tmp, **env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_memo_is_the_list_the_load_returned(kc_env, tmp_path):
    """What the memo witnesses is what the full load noted, plus kernelcache's own files; the
    load noted the facts its answer rests on: the source, the header the compiler read, the
    binary, the compiler found on PATH, tvm-ffi's library."""
    base = make_project(tmp_path / "proj")
    code = f"""
import json, marshal
from pathlib import Path
import kernelcache as kc
from kernelcache.lookup import loader, recall_write
from kernelcache.base.warm_facts import memo_path
spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({str(base)!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int], int]"}})
for digest in ("a" * 40, "b" * 40):  # built, then a hit
    mod, res = loader.load_with_result(spec, recall=digest)
    rec = marshal.loads(open(memo_path(digest), "rb").read())
    print(json.dumps(dict(status=str(res.status), spoiled=res.rested_on.spoiled,
                          noted=sorted(p.decode() for p in res.rested_on.stats),
                          absent=sorted(p.decode() for p in res.rested_on.absent),
                          own=recall_write.own_files(), so=res.so_path,
                          memo=sorted(p.decode() for p in rec[6].split(b"\\0")),
                          memo_absent=sorted(p.decode() for p in rec[8].split(b"\\0") if p))))
"""
    lines = kc_env.run_py(code, cwd=kc_env.tmp).stdout.strip().splitlines()[-2:]
    import tvm_ffi

    lib = os.path.realpath(os.path.join(os.path.dirname(tvm_ffi.__file__), "lib", "libtvm_ffi.so"))
    for line, status in zip(lines, ("built", "hit")):
        got = json.loads(line)
        assert got["status"] == status and got["spoiled"] is None
        assert got["memo"] == sorted(set(got["noted"]) | set(got["own"]))
        assert got["memo_absent"] == got["absent"]
        for fact in (str(base / "add.cc"), str(base / "include" / "kc_add.h"), got["so"], str(kc_env.cxx), lib):
            assert fact in got["noted"], (status, fact)


def test_a_binary_replaced_under_a_process_that_admitted_it_is_not_recorded(kc_env, tmp_path):
    """A process admitted an entry (its bytes verified, its module kept); the binary is then
    replaced by other valid bytes; the same process's next full load answers from its kept module.
    That answer rests on the bytes verified before, not on the file now there: it is not recorded,
    and the next process verifies the file (rejects it) instead of recalling it."""
    base = make_project(tmp_path / "proj")
    other = make_project(tmp_path / "other", offset=1)
    assert _load(kc_env, base) == {"value": 3, "recalled": False}
    assert _load(kc_env, base) == {"value": 3, "recalled": True}
    recall_dir = kc_env.cache / "v1" / "recall"
    code = f"""
import json, os, shutil
from pathlib import Path
import kernelcache as kc
from kernelcache.lookup import front, loader
from tests.support import replace_file
spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({str(base)!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int], int]"}})
bad = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({str(other)!r}), include_dirs=["include"],
                    functions={{"add": "Callable[[int, int], int]"}})
shutil.rmtree({str(recall_dir)!r})  # the full path, in this process
mod, res = loader.load_with_result(spec, recall=front.digest(spec))
so = res.so_path
replace_file(Path(so), Path(loader.load_with_result(bad)[1].so_path).read_bytes())
shutil.rmtree({str(recall_dir)!r})
again, res2 = loader.load_with_result(spec, recall=front.digest(spec))
print(json.dumps(dict(same=again is mod, value=again.add(1, 2), spoiled=getattr(res2, "rested_on", None) and
                      res2.rested_on.spoiled,
                      recorded=os.path.exists({str(recall_dir)!r}) and bool(os.listdir({str(recall_dir)!r})))))
"""
    got = json.loads(kc_env.run_py(code, cwd=kc_env.tmp).stdout.strip().splitlines()[-1])
    assert got["same"] and got["value"] == 3
    # the next process: the full path verifies the file, rejects the other bytes and builds again
    before = kc_env.compiles()
    assert _load(kc_env, base) == {"value": 3, "recalled": False}
    assert kc_env.compiles() - before == 1
    assert got["spoiled"] and not got["recorded"]


CUDA_SRC = """#include <tvm/ffi/function.h>
__global__ void kc_noop() {}
int64_t add(int64_t a, int64_t b) { return a + b; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""


@pytest.mark.skipif(not os.path.exists("/usr/local/cuda/bin/nvcc"), reason="needs the CUDA toolkit at /usr/local/cuda")
def test_an_nvcc_appearing_earlier_on_path_is_seen(kc_env, tmp_path):
    """CUDA_HOME unset: the full path takes the toolkit of the first ``nvcc`` on PATH, else
    /usr/local/cuda. A toolkit that appears in an earlier PATH directory (the PATH string itself
    unchanged) is another nvcc, so another key: the full path must decide, not recall."""
    base = tmp_path / "proj"
    (base / "include").mkdir(parents=True)
    (base / "add.cu").write_text(CUDA_SRC)
    toolkit = tmp_path / "toolkit"
    (toolkit / "bin").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    path = os.pathsep.join([str(toolkit / "bin"), env.get("PATH", "")])
    run_env = dict(PATH=path, KERNELCACHE_CUDA_ARCH="9.0")

    def load(**extra: str) -> dict:
        kc_env_env = kc_env.env(**run_env, **extra)
        for k in ("CUDA_HOME", "CUDA_PATH"):
            kc_env_env.pop(k, None)
        import subprocess
        import sys

        out = subprocess.run([sys.executable, "-c", LOAD.format(name="cu_adder", src="add.cu", base=str(base))],
                             env=kc_env_env, cwd=kc_env.tmp, capture_output=True, text=True, timeout=600,
                             stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert load() == {"value": 3, "recalled": False}  # built with /usr/local/cuda's nvcc
    assert load(KERNELCACHE_NO_BUILD="1") == {"value": 3, "recalled": False}  # a hit, recorded
    assert load(KERNELCACHE_NO_BUILD="1") == {"value": 3, "recalled": True}
    # a toolkit earlier on PATH: its nvcc runs the real one, but it is another tool (another key)
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexec /usr/local/cuda/bin/nvcc \"$@\"\n")
    nvcc.chmod(0o755)
    (toolkit / "include").mkdir()
    os.symlink("/usr/local/cuda/include/cuda_runtime.h", toolkit / "include" / "cuda_runtime.h")
    assert load(KERNELCACHE_NO_BUILD="1") == {"error": "CacheMissError", "recalled": False}
    shutil.rmtree(toolkit)
    assert load(KERNELCACHE_NO_BUILD="1")["value"] == 3
