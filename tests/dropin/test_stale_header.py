"""The motivating fault: a header edited with its mtime set back.

tvm-ffi keys its build directory on the inline source text / source *paths* and lets ninja
decide by mtimes, so in a fresh process ``tvm_ffi.cpp.load_inline`` (and ``load``) runs the old
binary. The drop-in keys headers by content (the compiler's dependency records): it rebuilds and
runs the new code. Real processes, real compiler, real ``os.utime``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import tvm_env

HEADER_V1 = "#define KC_VALUE 1\n"
HEADER_V2 = "#define KC_VALUE 2\n"  # same size: only the bytes differ
INLINE = '#include "kc_value.h"\nint64_t value() { return KC_VALUE; }\n'
FILE_SRC = ('#include <tvm/ffi/function.h>\n#include "kc_value.h"\n'
            "int64_t value() { return KC_VALUE; }\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(value, value);\n")

CALL = """
import json, sys
api = sys.argv[1]
if api == "tvm_ffi":
    import tvm_ffi.cpp as jit
else:
    from kernelcache import tvm_ffi as jit
kind, inc, src = {kind!r}, {inc!r}, {src!r}
if kind == "inline":
    mod = jit.load_inline("stale_hdr", cpp_sources={inline!r}, functions=["value"], extra_include_paths=[inc])
else:
    mod = jit.load("stale_hdr", sources=[src], extra_include_paths=[inc])
print(json.dumps(mod.value()))
"""


def _run(env, api: str, code: str) -> tuple[int, int]:
    """(value returned in a fresh process, compiles it ran)."""
    import subprocess
    import sys

    before = env.compiles()
    proc = subprocess.run([sys.executable, "-c", code, api], env=tvm_env(env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), env.compiles() - before


@pytest.mark.parametrize("kind", ["inline", "files"])
def test_header_edit_with_restored_mtime(kind: str, dropin_env, tmp_path: Path) -> None:
    inc = tmp_path / "proj" / "include"
    inc.mkdir(parents=True)
    header = inc / "kc_value.h"
    header.write_text(HEADER_V1)
    src = tmp_path / "proj" / "value.cc"
    src.write_text(FILE_SRC)
    code = CALL.format(kind=kind, inc=str(inc), src=str(src), inline=INLINE)

    assert _run(dropin_env, "tvm_ffi", code) == (1, 1)
    assert _run(dropin_env, "kernelcache", code) == (1, 1)

    st = header.stat()
    header.write_text(HEADER_V2)
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))  # the edit hides behind the old mtime
    assert header.stat().st_mtime_ns == st.st_mtime_ns

    stale, tvm_compiles = _run(dropin_env, "tvm_ffi", code)
    assert (stale, tvm_compiles) == (1, 0), (
        "tvm_ffi.cpp no longer runs the stale binary here: the motivating fault is gone in this version")
    assert _run(dropin_env, "kernelcache", code) == (2, 1)  # rebuilt from the new header bytes
    assert _run(dropin_env, "kernelcache", code) == (2, 0)  # and cached

    header.write_text(HEADER_V1)  # flipping back hits the first entry: no rebuild
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _run(dropin_env, "kernelcache", code) == (1, 0)
