"""Every environment variable the full path reads is in the recall digest, or named here as no
answer's business: the digest's list (``recall.ENV``) is checked against the reads of real loads,
not kept by hand alone.

Each load runs in a fresh process whose ``os.environ`` records every name looked up after
``import tvm_ffi``: a build and a hit of ``kernelcache.load`` (C++ and, where nvcc is here, CUDA),
and the tvm-ffi drop-in's ``load_inline``. A new read the digest does not hold fails here until it
is put in the digest (it may change the answer) or named below with why it does not.
"""
from __future__ import annotations

import json
import os

import pytest

from kernelcache.lookup import recall
from tests.support import make_project

# read by the full path, and not part of any answer (entry, key or module)
NOT_AN_ANSWER = {
    "MAX_JOBS": "parallelism of a build: the same bytes",
    "TMPDIR": "where Python's tempfile puts scratch files (builds run in the cache's own tmp area)",
    "TEMP": "as TMPDIR",
    "TMP": "as TMPDIR",
    "DPKG_ADMINDIR": "where dpkg's status lives, read when a build's record is written: which headers are "
                     "trusted by their package instead of stat-ed (the check's cost, not its answer)",
    "TVM_FFI_SKIP_DLPACK_C_EXCHANGE_API": "read by tvm_ffi.load_module itself, which a recalled call runs too",
}

# code that reads the whole environment, and why that is not an answer the digest misses
SCANS = {
    "kernelcache/base/settings.py:kc_environ": "keeps the KERNELCACHE_* variables, all of them in the digest",
    "kernelcache/build/ninja.py:ninja": "the build's environment (a build is keyed by toolchain.ENV_ALLOWLIST, "
                                        "each in the digest); a hit never runs it",
}

RECORD = """
import json, os, sys
reads = set()
SKIP = ("_collections_abc", __file__)


class Recording(type(os.environ)):
    def __getitem__(self, k):
        f = sys._getframe(1)
        while f is not None and (any(x in f.f_code.co_filename for x in SKIP)
                                 or f.f_code.co_name.startswith("<")):  # a comprehension: its function
            f = f.f_back
        where = f.f_code.co_filename if f is not None else "?"
        if "/kernelcache/" in where:
            where = "kernelcache/" + where.rpartition("/kernelcache/")[2]
        reads.add((k, where + ":" + (f.f_code.co_name if f is not None else "?")))
        return super().__getitem__(k)


e = os.environ
os.environ = Recording(e._data, e.encodekey, e.decodekey, e.encodevalue, e.decodevalue)
import tvm_ffi  # noqa: F401 - its own import-time reads are not the full path's
reads.clear()
from pathlib import Path
import kernelcache as kc
what, base = sys.argv[1], Path(sys.argv[2])
if what == "dropin":
    import kernelcache.tvm_ffi as d
    assert d.load_inline("env_inline", cpp_sources="int add(int a, int b) {{ return a + b; }}\\n",
                         functions=["add"]).add(1, 2) == 3
else:
    from kernelcache.lookup import front, loader
    spec = kc.KernelSpec(name="env_" + what, sources=[{{"cpp": "add.cc", "cuda": "add.cu"}}[what]], root=base,
                         include_dirs=["include"], functions={{"add": "Callable[[int, int], int]"}})
    mod, res = loader.load_with_result(spec, recall=front.digest(spec))
    assert mod.add(1, 2) == 3
    print(res.status, file=sys.stderr)
print(json.dumps(sorted(reads)))
"""

CUDA_SRC = """#include <tvm/ffi/function.h>
#include "kc_add.h"
__global__ void kc_noop() {}
int64_t add(int64_t a, int64_t b) { return a + b + KC_OFFSET; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""


@pytest.mark.parametrize("what", ["cpp", "cuda", "dropin"])
def test_every_variable_the_full_path_reads_is_in_the_digest(kc_env, tmp_path, what):
    if what == "cuda" and not os.path.exists("/usr/local/cuda/bin/nvcc"):
        pytest.skip("needs the CUDA toolkit at /usr/local/cuda (nvcc compiles here; nothing CUDA runs)")
    base = make_project(tmp_path / "proj")
    (base / "add.cu").write_text(CUDA_SRC)
    script = tmp_path / "record.py"
    script.write_text(RECORD.format())
    extra = {"KERNELCACHE_CUDA_ARCH": "9.0"} if what == "cuda" else {}
    if what == "dropin":
        extra["KERNELCACHE_NO_RECALL"] = "1"  # both runs take the full path
    seen = []
    for run in ("build", "hit"):
        out = kc_env.run_py(f"import runpy, sys; sys.argv = ['record', {what!r}, {str(base)!r}]; "
                            f"runpy.run_path({str(script)!r}, run_name='__main__')", cwd=kc_env.tmp, **extra)
        seen.append({tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])})
        if what != "dropin":
            assert out.stderr.strip().splitlines()[-1] == ("built" if run == "build" else "hit"), out.stderr
    reads = seen[0] | seen[1]
    names = {name for name, where in reads if where not in SCANS}
    assert {"CXX", "PATH"} <= names  # the recorder saw the full path's reads
    assert set(SCANS) <= {where for _, where in reads}  # each scan named above still happens (a build ran)
    loose = sorted(n for n in names if n not in recall.ENV and not n.startswith("KERNELCACHE_") and n not in NOT_AN_ANSWER)
    assert not loose, (f"the full path read {loose}, which the recall digest does not hold: add each to "
                       "kernelcache.lookup.recall.ENV (it may change the answer), or to NOT_AN_ANSWER here with why "
                       f"(where: {sorted(w for n, w in reads if n in loose)})")
