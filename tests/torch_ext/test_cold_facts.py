"""What a cold torch build pays besides the compile (issue 24): the surface child, torch's flags.

* The exported surface of a fresh ``torch_python`` build is recorded by a *light* child that
  loads torch's libraries, not torch's Python package (``import torch`` costs seconds); a module
  whose import needs torch's Python side makes that child fail, and the full child (torch
  imported first) decides. The modules below log, from their init, whether torch was imported
  in the process that imports them (a file named by ``KC_TEST_SURFACE_LOG``), so the test sees
  which child ran.
* torch's flag lines are memoised per installation and flag arguments, not per extension name:
  a new extension with the same flags does not import ``torch.utils.cpp_extension``, and its
  module still gets its own name define (else ``PyInit_<name>`` is missing and it cannot load).

The modules include only pybind11 (a few seconds to compile, not ~40 s for torch/extension.h).
"""
from __future__ import annotations

import json

LOGGING_MODULE = """#include <pybind11/pybind11.h>
#include <cstdio>
#include <cstdlib>
namespace py = pybind11;
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  bool torch_in = py::module_::import("sys").attr("modules").contains("torch");
  if (const char* log = std::getenv("KC_TEST_SURFACE_LOG")) {{
    if (FILE* f = std::fopen(log, "a")) {{ std::fprintf(f, "torch=%d\\n", torch_in ? 1 : 0); std::fclose(f); }}
  }}
  if ({needs_torch} && !torch_in) throw py::import_error("this module needs torch imported first");
  m.def("f", [] {{ return {value}; }});
}}
"""


def _log_lines(path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_fresh_module_is_inspected_without_importing_torch(torch_env, monkeypatch):
    from kernelcache import cpp_extension

    log = torch_env.tmp / "surface.log"
    monkeypatch.setenv("KC_TEST_SURFACE_LOG", str(log))
    mod = cpp_extension.load_inline("kc_light_surface", LOGGING_MODULE.format(needs_torch="false", value=7),
                                    no_implicit_headers=True)
    assert mod.f() == 7 and torch_env.compiles() == 1
    # the surface child (torch not imported), then this process's import (torch imported)
    assert _log_lines(log) == ["torch=0", "torch=1"]


def test_a_module_that_needs_torch_at_import_is_inspected_by_the_full_child(torch_env, monkeypatch):
    from kernelcache import cpp_extension

    log = torch_env.tmp / "surface.log"
    monkeypatch.setenv("KC_TEST_SURFACE_LOG", str(log))
    mod = cpp_extension.load_inline("kc_needs_torch", LOGGING_MODULE.format(needs_torch="true", value=8),
                                    no_implicit_headers=True)
    assert mod.f() == 8 and torch_env.compiles() == 1
    # the light child failed (torch=0, ImportError), the full child recorded it, then this process
    assert _log_lines(log) == ["torch=0", "torch=1", "torch=1"]


NEW_NAME = """
import json, sys
import torch
from kernelcache import cpp_extension
m = cpp_extension.load_inline({name!r}, {src!r}, no_implicit_headers=True)
print("RESULT " + json.dumps({{"f": m.f(), "module": m.__name__,
                               "torch_cpp_extension": "torch.utils.cpp_extension" in sys.modules}}))
"""


def _new_name(torch_env, name: str, value: int) -> dict:
    src = LOGGING_MODULE.format(needs_torch="false", value=value)
    out = torch_env.run_py(NEW_NAME.format(name=name, src=src)).stdout
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])


def test_a_new_extension_with_known_flags_does_not_ask_torch_for_them(torch_env):
    first = _new_name(torch_env, "kc_flags_first", 1)
    assert first == {"f": 1, "module": "kc_flags_first", "torch_cpp_extension": True}  # asked torch once
    second = _new_name(torch_env, "kc_flags_second", 2)
    # another name and other sources, the same flags: the memo's lines, with this name's define
    assert second == {"f": 2, "module": "kc_flags_second", "torch_cpp_extension": False}
    assert torch_env.compiles() == 2
