"""The per-kernel commands know torch entries and fetched ones: ``explain``/``warm`` rebuild a torch
spec (kind, ABI facts, torch's flags verbatim) from a torch manifest, so a cached extension is a
``hit`` (before: a tvm-ffi spec was rebuilt, and explain said ``miss`` with invented tvm-ffi flag
and ABI changes); on a host whose entry came from the fleet, ``explain NAME`` finds it (before:
"unknown kernel" while listing the name among the known ones).

The extension is a plain C library (``is_python_module=False``, no torch headers): compiling it
costs about a second, and it goes through every torch-kind step (flags, key, manifest).
"""
from __future__ import annotations

import subprocess
import sys

LIB = 'extern "C" int kc_cli_value() { return 7; }\n'
LOAD = f"""
import kernelcache as kc
from kernelcache import cpp_extension
path = cpp_extension.load_inline("kc_cli_lib", {LIB!r}, is_python_module=False, no_implicit_headers=True)
print("RESULT", path, kc.stats()["builds"])
"""


def _cli(kc_env, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelcache", *args], env=kc_env.env(**env), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_explain_and_warm_rebuild_the_torch_spec_of_a_torch_entry(torch_env):
    torch_env.run_py(LOAD)
    assert torch_env.compiles() == 1
    out = _cli(torch_env, "explain", "kc_cli_lib")
    assert out.returncode == 0, out.stderr
    assert "status:  hit" in out.stdout, out.stdout
    assert "kind:    torch_library" in out.stdout and "  extra_abi: " in out.stdout, out.stdout
    assert "tvm" not in out.stdout.split("why miss:")[-1] if "why miss:" in out.stdout else True
    warm = _cli(torch_env, "warm", "kc_cli_lib")
    assert warm.returncode == 0 and "1 hit" in warm.stdout, warm.stdout + warm.stderr
    assert torch_env.compiles() == 1  # nothing rebuilt: the rebuilt spec has the entry's key
    info = _cli(torch_env, "explain", "kc_cli_lib", "--json")
    import json

    data = json.loads(info.stdout)
    assert data["status"] == "hit" and data["inputs"]["kind"] == "torch_library"
    assert data["inputs"]["extra_abi"]["torch"]  # the torch facts of the entry, not tvm-ffi's


def test_explain_finds_an_entry_fetched_from_the_fleet(torch_env, tmp_path):
    remote = f"file://{tmp_path / 'fleet'}"
    (tmp_path / "fleet").mkdir()
    torch_env.run_py(LOAD, KERNELCACHE_REMOTE=remote, KERNELCACHE_REMOTE_MODE="readwrite")
    assert torch_env.compiles() == 1
    b_cache = str(tmp_path / "host_b")
    got = torch_env.run_py(LOAD, KERNELCACHE_DIR=b_cache, KERNELCACHE_REMOTE=remote,
                           KERNELCACHE_REMOTE_MODE="read").stdout
    assert "RESULT" in got and got.strip().endswith(" 0") and torch_env.compiles() == 1  # fetched, not built
    out = _cli(torch_env, "explain", "kc_cli_lib", KERNELCACHE_DIR=b_cache)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unknown kernel" not in out.stdout + out.stderr
    assert "status:  fetched" in out.stdout, out.stdout
