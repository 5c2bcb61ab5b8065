"""toolchain.py: compilers, CUDA home, ninja, tvm-ffi paths, tool identities and their memos.

Real executables stand in for tools (shell scripts on a private PATH); identities are checked
to change exactly when the binary changes, and the on-disk memo to spare the `--version` run.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from kernelcache.base.errors import ToolchainError
from kernelcache.host import toolchain

import kernelcache as kc


def _tool(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_find_cxx_honours_cxx_and_names_the_fix(tmp_path, monkeypatch):
    cxx = _tool(tmp_path / "bin" / "my-cxx", "exec g++ \"$@\"")
    monkeypatch.setenv("CXX", str(cxx))
    assert toolchain.find_cxx() == str(cxx)
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(ToolchainError, match="'no-such-compiler-xyz' not found on PATH.*set CXX"):
        toolchain.find_cxx()


def test_cuda_home_needs_nvcc_and_headers(tmp_path, monkeypatch):
    home = tmp_path / "cuda"
    _tool(home / "bin" / "nvcc", "echo 'Cuda compilation tools, release 12.4, V12.4.99'")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    # bin/nvcc alone is not a toolkit: CUDA_HOME is skipped
    found = None
    try:
        found = toolchain.find_cuda_home()
    except ToolchainError:
        pass
    assert found != os.path.realpath(home)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("")
    assert toolchain.find_cuda_home() == os.path.realpath(home)
    assert toolchain.find_nvcc() == str(Path(os.path.realpath(home)) / "bin" / "nvcc")
    kc.reset_process_state()
    assert toolchain.nvcc_major() == "12"


def test_tool_identity_follows_the_binary_and_is_memoised_on_disk(tmp_path):
    log = tmp_path / "runs.log"
    tool = _tool(tmp_path / "bin" / "cc1", f"echo run >> {log}; echo 'cc1 version 1'")
    memo = tmp_path / "memo"
    kc.reset_process_state()
    ident = toolchain.tool_identity(str(tool), memo)
    assert ident["version"] == "cc1 version 1" and ident["path"] == str(tool.resolve())
    assert toolchain.tool_identity(str(tool), memo) == ident and log.read_text().count("run") == 1
    kc.reset_process_state()  # a new process: the disk memo answers, no --version run
    assert toolchain.tool_identity(str(tool), memo) == ident and log.read_text().count("run") == 1
    link = tmp_path / "bin" / "cc1-link"
    link.symlink_to(tool)
    assert toolchain.tool_identity(str(link), memo) == ident  # another spelling, same tool
    _tool(tool, f"echo run >> {log}; echo 'cc1 version 2'")  # the binary changed
    assert toolchain.tool_identity(str(tool), memo)["version"] == "cc1 version 2"
    with pytest.raises(ToolchainError, match="not found"):
        toolchain.tool_identity(str(tmp_path / "missing"), memo)


def test_identities_computed_ahead_are_taken_not_computed_again(tmp_path):
    """A fresh cache starts the compiler's --version and the library's hash in threads; the
    identity calls then take those results: one --version run, the same identities as computed
    directly, and none started where the disk memo already has them."""
    log = tmp_path / "runs.log"
    gate = tmp_path / "gate"
    # the --version run waits for the gate: the identity call must wait for it, not run its own
    tool = _tool(tmp_path / "bin" / "cc1",
                 f"echo run >> {log}; i=0; while [ ! -e {gate} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; "
                 "echo 'cc1 version 3'")
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"x" * (3 << 20))
    memo = tmp_path / "memo"
    kc.reset_process_state()
    assert toolchain.identities_ahead([str(tool)], [str(lib)], memo) is True
    assert toolchain.computing_ahead()
    gate.touch()
    ident = toolchain.tool_identity(str(tool), memo)
    assert ident["version"] == "cc1 version 3" and log.read_text().count("run") == 1
    assert toolchain.file_identity(str(lib), memo)["sha256"] == toolchain.sha256_file(lib)
    assert not toolchain.computing_ahead()
    kc.reset_process_state()  # a new process over the same cache: memoised on disk, nothing starts
    assert toolchain.identities_ahead([str(tool)], [str(lib)], memo) is False
    assert toolchain.tool_identity(str(tool), memo) == ident and log.read_text().count("run") == 1
    # a path that cannot be stat-ed starts nothing; the identity call reports it
    assert toolchain.identities_ahead([str(tmp_path / "missing")], [], memo) is False
    with pytest.raises(ToolchainError, match="not found"):
        toolchain.tool_identity(str(tmp_path / "missing"), memo)


def test_threads_starting_and_taking_identities_at_once_each_get_them(tmp_path):
    """Loads in threads (``kc.warm``) start and ask for the same identities at once: every
    thread gets the identity, none meets a computation registered but not yet started (a full
    run saw "cannot join thread before it is started")."""
    import threading

    tool = _tool(tmp_path / "bin" / "cc3", "echo 'cc3 version 1'")
    lib = tmp_path / "liby.so"
    lib.write_bytes(b"y" * 4096)
    for round_ in range(25):
        kc.reset_process_state()
        memo = tmp_path / f"memo{round_}"
        got, errors = [], []
        start = threading.Barrier(8)

        def one() -> None:
            try:
                start.wait(timeout=30)
                toolchain.identities_ahead([str(tool)], [str(lib)], memo)
                got.append((toolchain.tool_identity(str(tool), memo)["version"],
                            toolchain.file_identity(str(lib), memo)["sha256"]))
            except Exception as e:  # noqa: BLE001 - collected, asserted below
                errors.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        assert got == [("cc3 version 1", toolchain.sha256_file(lib))] * 8


def test_a_reset_waits_for_a_computation_started_ahead(tmp_path):
    """reset_process_state() joins what was started ahead, so nothing computed before the reset
    lands in the memo after it."""
    log = tmp_path / "runs.log"
    tool = _tool(tmp_path / "bin" / "cc2", f"sleep 0.2; echo run >> {log}; echo 'cc2 version 1'")
    kc.reset_process_state()
    assert toolchain.identities_ahead([str(tool)], [], None) is True
    kc.reset_process_state()
    assert log.read_text().count("run") == 1  # finished before the reset returned
    assert not toolchain.computing_ahead() and not toolchain._identity_memo
    assert toolchain.tool_identity(str(tool))["version"] == "cc2 version 1"
    assert log.read_text().count("run") == 2  # forgotten by the reset: computed anew


def test_file_identity_and_hashes(tmp_path):
    f = tmp_path / "lib.so"
    f.write_bytes(b"abc")
    assert toolchain.sha256_file(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert toolchain.file_identity(str(f))["sha256"] == toolchain.sha256_file(f)
    h = toolchain.content_hash(f)
    f.write_bytes(b"abd")
    assert toolchain.content_hash(f) != h and len(h) == 32


def test_tvm_ffi_paths_point_at_the_installed_package():
    p = toolchain.tvm_ffi_paths()
    assert Path(p.include_dir, "tvm", "ffi", "function.h").is_file()
    assert Path(p.lib_path).is_file() and Path(p.lib_path).name.startswith("libtvm_ffi")
    import importlib.metadata

    assert p.version == importlib.metadata.version("apache-tvm-ffi")


def test_ninja_is_found_and_runs():
    import subprocess

    ninja = toolchain.find_ninja()
    out = subprocess.run([ninja, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip()[0].isdigit()


def test_env_inputs_are_the_allowlist_only(monkeypatch):
    monkeypatch.setenv("CPATH", "/x")
    monkeypatch.setenv("MAX_JOBS", "3")
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)
    env = toolchain.env_inputs()
    assert env.get("CPATH") == "/x" and "MAX_JOBS" not in env and "NVCC_APPEND_FLAGS" not in env
    assert set(env) <= set(toolchain.ENV_ALLOWLIST)
