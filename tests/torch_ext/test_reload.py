"""In-process reload with torch's semantics: the same name loaded again with other inputs in one
process gives the module (or library) built from those inputs, under torch's versioned names.

Before the fix the second ``load_inline`` built and validated the new binary, then handed back
the first module (pybind11 3 returns the module it already created under that name). The
modules here include only pybind11 (a few seconds to compile, not ~40 s for torch/extension.h).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

MODULE = """#include <pybind11/pybind11.h>
int f() {{ return {value}; }}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("f", &f); }}
"""
LIBRARY = 'extern "C" int kc_value() {{ return {value}; }}\n'


def _module(value: int):
    from kernelcache import cpp_extension

    return cpp_extension.load_inline("kc_reloaded", MODULE.format(value=value), no_implicit_headers=True)


def test_changed_code_in_one_process_returns_the_new_module_under_torchs_versioned_name(torch_env):
    m1 = _module(123)
    m2 = _module(456)
    assert (m1.f(), m2.f()) == (123, 456)
    # (the last component: a name another test of this process imported already is imported under
    # a private package, surface.import_path, and keeps torch's name as its last component)
    assert m1 is not m2 and [m.__name__.rsplit(".", 1)[-1] for m in (m1, m2)] == ["kc_reloaded", "kc_reloaded_v1"]
    assert torch_env.compiles() == 2
    # Inputs seen before keep their version: the module already loaded, nothing rebuilt.
    assert _module(456) is m2 and _module(123) is m1
    assert _module(789).f() == 789 and torch_env.compiles() == 3
    assert sorted(p.parent.parent.name for p in torch_env.entries()) == [
        "kc_reloaded", "kc_reloaded_v1", "kc_reloaded_v2"]


def test_a_fresh_process_starts_again_at_the_plain_name_and_hits(torch_env):
    _module(123)
    _module(456)
    code = f"""
        from kernelcache import cpp_extension
        m = cpp_extension.load_inline("kc_reloaded", {MODULE.format(value=456)!r}, no_implicit_headers=True)
        print("RESULT", m.__name__, m.f())
    """
    torch_env.reset_counts()
    out = torch_env.run_py(code).stdout
    assert "RESULT kc_reloaded 456" in out  # torch's numbering restarts per process: v0 is the name
    assert torch_env.compiles() == 1  # (456 as v0 is a new module name: built once, then a hit)
    assert "RESULT kc_reloaded 456" in torch_env.run_py(code).stdout and torch_env.compiles() == 1


def test_a_module_of_another_binary_is_never_handed_back(torch_env):
    """A header edit between two loads keeps torch's version (torch hashes sources, not headers);
    the module returned must still be the one the key names, not the one loaded before."""
    from kernelcache import cpp_extension

    src = torch_env.tmp / "pkg" / "ext.cpp"
    src.parent.mkdir()
    (src.parent / "value.h").write_text("#define VALUE 1\n")
    src.write_text('#include <pybind11/pybind11.h>\n#include "value.h"\n'
                   'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("f", [] { return VALUE; }); }\n')
    m1 = cpp_extension.load("kc_header_reload", [str(src)])
    (src.parent / "value.h").write_text("#define VALUE 2\n")
    m2 = cpp_extension.load("kc_header_reload", [str(src)])
    assert (m1.f(), m2.f()) == (1, 2) and m1 is not m2
    assert torch_env.compiles() == 2


def test_a_library_loaded_again_with_new_code_returns_the_new_library(torch_env):
    from kernelcache import cpp_extension

    out = torch_env.tmp / "build_dir"
    paths = [cpp_extension.load_inline("kc_reloaded_lib", LIBRARY.format(value=v), is_python_module=False,
                                       no_implicit_headers=True, build_directory=str(out)) for v in (1, 2)]
    assert paths[0] != paths[1]
    assert [ctypes.CDLL(p).kc_value() for p in paths] == [1, 2]
    # build_directory gets torch's output names too (callers inspect it, e.g. with cuobjdump)
    assert [(out / n).read_bytes() for n in ("kc_reloaded_lib.so", "kc_reloaded_lib_v1.so")] == [
        Path(p).read_bytes() for p in paths]
