"""The torch drop-in's repeated calls are recalled in a fresh process (``kernelcache.lookup.recall``)
without the loader, under torch's in-process module names, and only while what the full path's
answer rested on still stands.

Real processes and compiles (pybind11-only modules: a few seconds each, not ~40 s for
``torch/extension.h``). Whether a call was recalled is read from the process itself: a recalled
call never imports ``kernelcache.lookup.loader``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

MODULE = """#include <pybind11/pybind11.h>
int f() {{ return {value}; }}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("f", &f); }}
"""
LIBRARY = 'extern "C" int kc_value() {{ return {value}; }}\n'
HEADED = ('#include <pybind11/pybind11.h>\n#include "value.h"\n'
          'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("f", [] { return VALUE; }); }\n')

PROBE = """
import json, sys
import torch
from kernelcache import cpp_extension as ce
out = []
for value in {values!r}:
    m = ce.load_inline("kc_recalled", {module!r}.format(value=value), no_implicit_headers=True)
    out.append([m.__name__, m.f(), id(m)])
print("RESULT " + json.dumps({{"loads": out, "recalled": "kernelcache.lookup.loader" not in sys.modules}}))
"""


def _run(env, code: str, **extra: str):
    """A fresh process in the test's own directory: the working directory's ``*.egg-info`` are part
    of what a recall witnesses (``stamps.distributions_stamp``), and tests that build a wheel of
    this repository rewrite its ``kernelcache.egg-info`` while others run."""
    return env.run_py(code, cwd=env.tmp, **extra)


def _result(proc) -> dict:
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _probe(env, *values: int) -> dict:
    return _result(_run(env, PROBE.format(values=list(values), module=MODULE)))


def test_a_repeated_call_is_recalled_under_torchs_names_for_this_process(torch_env):
    first = _probe(torch_env, 1, 2)
    assert [ld[:2] for ld in first["loads"]] == [["kc_recalled", 1], ["kc_recalled_v1", 2]]
    assert not first["recalled"] and torch_env.compiles() == 2
    again = _probe(torch_env, 1, 2, 1)
    assert [ld[:2] for ld in again["loads"]] == [["kc_recalled", 1], ["kc_recalled_v1", 2], ["kc_recalled", 1]]
    assert again["loads"][0][2] == again["loads"][2][2]  # inputs seen before: the same module object
    assert again["recalled"] and torch_env.compiles() == 2
    # value 2 first: this process's versioning names it kc_recalled, not the kc_recalled_v1 it was
    # recorded under, so the full path decides (and builds it under that name, as torch would)
    other = _probe(torch_env, 2)
    assert other["loads"][0][:2] == ["kc_recalled", 2] and not other["recalled"]
    assert torch_env.compiles() == 3
    assert _probe(torch_env, 2)["recalled"] and torch_env.compiles() == 3


def test_a_header_edited_with_its_mtime_restored_is_rebuilt_not_recalled(torch_env):
    pkg = torch_env.tmp / "pkg"
    pkg.mkdir()
    (pkg / "ext.cpp").write_text(HEADED)
    header = pkg / "value.h"
    header.write_text("#define VALUE 1\n")
    code = f"""
        import json, sys
        import torch
        from kernelcache import cpp_extension as ce
        m = ce.load("kc_recalled_header", [{str(pkg / 'ext.cpp')!r}])
        print("RESULT " + json.dumps({{"value": m.f(), "recalled": "kernelcache.lookup.loader" not in sys.modules}}))
    """
    assert _result(_run(torch_env, code)) == {"value": 1, "recalled": False}
    assert _result(_run(torch_env, code)) == {"value": 1, "recalled": True}
    st = header.stat()
    header.write_text("#define VALUE 2\n")  # same size, mtime set back
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _result(_run(torch_env, code)) == {"value": 2, "recalled": False}
    assert torch_env.compiles() == 2
    assert _result(_run(torch_env, code)) == {"value": 2, "recalled": True}


def test_a_library_is_recalled_and_copied_to_the_build_directory(torch_env):
    out = torch_env.tmp / "build_dir"
    code = f"""
        import ctypes, json, sys
        import torch
        from kernelcache import cpp_extension as ce
        p = ce.load_inline("kc_recalled_lib", {LIBRARY.format(value=7)!r}, is_python_module=False,
                           no_implicit_headers=True, build_directory={str(out)!r})
        print("RESULT " + json.dumps({{"value": ctypes.CDLL(p).kc_value(), "path": p,
                                       "recalled": "kernelcache.lookup.loader" not in sys.modules}}))
    """
    first = _result(_run(torch_env, code))
    (out / "kc_recalled_lib.so").unlink()
    second = _result(_run(torch_env, code))
    assert (first["recalled"], second["recalled"]) == (False, True)
    assert first["value"] == second["value"] == 7 and first["path"] == second["path"]
    assert (out / "kc_recalled_lib.so").read_bytes() == Path(second["path"]).read_bytes()
    assert torch_env.compiles() == 1


def test_torchs_own_function_routed_by_install_is_recalled(torch_env):
    code = f"""
        import json, sys
        import torch
        import kernelcache.cpp_extension
        kernelcache.cpp_extension.install()
        from torch.utils.cpp_extension import load_inline
        m = load_inline("kc_recalled_routed", {MODULE.format(value=5)!r}, no_implicit_headers=True)
        print("RESULT " + json.dumps({{"value": m.f(), "recalled": "kernelcache.lookup.loader" not in sys.modules}}))
    """
    assert _result(_run(torch_env, code)) == {"value": 5, "recalled": False}
    assert _result(_run(torch_env, code)) == {"value": 5, "recalled": True}
    # a setting that asks for the full path is never recalled
    assert _result(_run(torch_env, code, KERNELCACHE_REBUILD="1")) == {"value": 5, "recalled": False}
    assert torch_env.compiles() == 2
