"""A failed build raises what torch callers catch (a RuntimeError) with the command, compiler
output and exit status, and is never cached as a failure: fix the cause, call again, it builds.
Standalone executables keep the compiles cheap (no torch headers are included)."""
from __future__ import annotations

import subprocess

import pytest

import kernelcache as kc

BAD = "int main( {\n"
GOOD = '#include <cstdio>\nint main() { std::puts("fixed"); return 0; }\n'


def test_failed_build_is_a_runtime_error_with_command_output_and_status_then_a_fix_builds(torch_env):
    from kernelcache import cpp_extension

    src = torch_env.tmp / "tool.cpp"
    src.write_text(BAD)
    with pytest.raises(RuntimeError) as info:
        cpp_extension.load("kc_err_tool", [str(src)], is_python_module=False, is_standalone=True)
    err = info.value
    assert isinstance(err, kc.BuildError) and isinstance(err, cpp_extension.ExtensionBuildError)
    assert str(err).startswith("Error building extension 'kc_err_tool'")
    assert "tool.cpp" in err.command and err.returncode not in (0, None)
    assert "error" in err.output and "expected" in err.output
    assert torch_env.entries("kc_err_tool") == []  # nothing cached for the failure
    src.write_text(GOOD)
    path = cpp_extension.load("kc_err_tool", [str(src)], is_python_module=False, is_standalone=True)
    assert subprocess.run([path], capture_output=True, text=True, timeout=60).stdout == "fixed\n"
    assert len(torch_env.entries("kc_err_tool")) == 1


def test_plain_torch_raises_runtime_error_too(torch_env):
    from torch.utils import cpp_extension as torch_ce

    src = torch_env.tmp / "tool.cpp"
    src.write_text(BAD)
    with pytest.raises(RuntimeError, match="Error building extension 'kc_err_tool'"):
        torch_ce.load("kc_err_tool", [str(src)], is_python_module=False, is_standalone=True)


def test_mutually_exclusive_modes_raise_value_error_like_torch(torch_env):
    from kernelcache import cpp_extension

    src = torch_env.tmp / "tool.cpp"
    src.write_text(GOOD)
    with pytest.raises(ValueError, match="mutually exclusive"):
        cpp_extension.load("kc_err_tool", [str(src)], is_python_module=True, is_standalone=True)
    with pytest.raises(ValueError, match="Expected 'functions' to be a list or dict"):
        cpp_extension.load_inline("kc_err_inline", "int f() { return 1; }", functions=3)
    assert torch_env.compiles() == 0


def test_install_is_idempotent_and_uninstall_restores_torch(torch_env):
    import torch.utils.cpp_extension as tce

    from kernelcache import cpp_extension

    original = tce.load, tce.load_inline
    cpp_extension.install()
    cpp_extension.install()
    assert cpp_extension.is_installed() and getattr(tce.load, "__kernelcache_dropin__", False)
    cpp_extension.uninstall()
    assert (tce.load, tce.load_inline) == original and not cpp_extension.is_installed()
    cpp_extension.uninstall()  # a no-op when not installed
    assert (tce.load, tce.load_inline) == original


def test_invalid_name_is_a_value_error_in_torch_terms_and_leaves_nothing_behind(torch_env):
    from kernelcache import cpp_extension

    src = torch_env.tmp / "tool.cpp"
    src.write_text(GOOD)
    for call in (lambda: cpp_extension.load_inline("bad-name", "int f() { return 1; }"),
                 lambda: cpp_extension.load("bad-name", [str(src)]),
                 lambda: cpp_extension.load_inline("1st", "int f() { return 1; }", is_python_module=False)):
        with pytest.raises(ValueError) as info:
            call()
        assert "KernelSpec" not in str(info.value) and "extension name" in str(info.value)
    leftovers = [str(p) for p in torch_env.cache.rglob("*") if p.is_file()] if torch_env.cache.exists() else []
    assert not [p for p in leftovers if "bad-name" in p or "1st" in p], leftovers
    assert torch_env.compiles() == 0


def test_a_failed_build_shows_the_compiler_output_once_and_the_file_it_names_exists(torch_env):
    import re
    import traceback
    from pathlib import Path

    from kernelcache import cpp_extension

    with pytest.raises(RuntimeError) as info:
        cpp_extension.load_inline("kc_err_inline", "int f() { return 1 }\n", no_implicit_headers=True,
                                  is_python_module=False)
    err = info.value
    shown = "".join(traceback.format_exception(err))
    assert shown.count("error: expected") == 1, shown  # one error, not the loader's and the drop-in's
    named = set(re.findall(r"(/\S+?\.cpp):\d+", err.output))
    assert named and all(Path(p).is_file() for p in named), named  # the file the message points at
    assert "int f() { return 1 }" in Path(named.pop()).read_text()
    assert torch_env.entries() == []
