"""What differs per module kind after the link: the fresh-build check and admission.

``KernelSpec.kind`` says what a build produces. The plan (``plan._foreign_plan``), the build,
the key and publishing are shared by every kind; only two steps differ and live here:

* right after a build, before anything is published: ``fresh_surface`` loads the binary in a
  subprocess and records its exported surface (``kernelcache.surface``). A module that cannot
  be imported there is a build error (command, output, exit status) and is never cached;
* admission of an entry that passed the file checks (size, sha256, ELF, identity symbol):
  ``admit`` reads the identity nonce *before* the module's Python code runs (ctypes, or the
  bytes of an executable), then imports the module / loads the library, and compares what it
  exports with the surface recorded for these bytes.

tvm-ffi modules (the default kind) keep their own path in ``admit.accept`` and the loader.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import surface, validate
from .errors import BuildError
from .manifest import Manifest
from .spec import KernelSpec

SURFACE_TIMEOUT_S = 600.0
_PKG_PARENT = str(Path(__file__).resolve().parent.parent)
# Imports torch, then reads the path of the linked binary from stdin (empty line: exit quietly).
_RUNNER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import torch; "
           "path = sys.stdin.readline().strip(); "
           "from kernelcache.surface import main; raise SystemExit(main([sys.argv[1], path, sys.argv[2]]) if path else 0)")


def start_surface(spec: KernelSpec) -> subprocess.Popen | None:
    """The surface subprocess of a build: it imports torch, then reads the binary's path.

    Started after the link, not with the compiler: on a busy machine a concurrent torch import
    slowed the compile down by more than it saved (measured, benchmarks/RESULTS.md).
    """
    if spec.kind in ("tvm_ffi", "executable"):
        return None
    return subprocess.Popen([sys.executable, "-c", _RUNNER, _PKG_PARENT, spec.kind, spec.name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fresh_surface(spec: KernelSpec, so_path: Path, proc: subprocess.Popen | None = None) -> dict:
    """The surface of a fresh build, computed in a subprocess (raises BuildError on failure)."""
    if spec.kind == "executable":
        return {}
    proc = proc or start_surface(spec)
    assert proc is not None
    try:
        stdout, stderr = proc.communicate(str(so_path) + "\n", timeout=SURFACE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BuildError(spec.name, "<import check>", "importing the built module timed out") from None
    line = next((ln for ln in stdout.splitlines() if ln.startswith("KC_SURFACE ")), None)
    if proc.returncode != 0 or line is None:
        raise BuildError(spec.name, f"<import check: {spec.kind} {so_path}>",
                         "the built module does not load:\n" + stderr + stdout, proc.returncode)
    import json

    return json.loads(line[len("KC_SURFACE "):])


def _identity_bytes(path: Path, identity: str) -> bool:
    with open(path, "rb") as f:
        return identity.encode() in f.read()


def admit(spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
    """Load an entry of a torch kind whose file checks passed: (module or path, None) or (None, why)."""
    if spec.kind == "executable":
        if not _identity_bytes(path, m.identity):
            return None, validate.Rejection("identity", "executable does not hold its manifest's identity")
        if not os.access(path, os.X_OK):
            return None, validate.Rejection("binary", "executable is not executable")
        return str(path), None
    import torch  # the binary links libtorch: its libraries must be loaded first

    ident = validate.read_identity(path)  # dlopen by ctypes: no Python code of the module runs
    if ident != m.identity:
        return None, validate.Rejection("identity", f"identity {ident!r} != manifest's {m.identity!r} "
                                                    "(binary of another build)")
    recorded = m.surface or {}
    if spec.kind == "torch_python":
        mod = surface.import_path(spec.name, str(path))
        diff = surface.difference(recorded, surface.of_module(mod))
        if diff:
            return None, validate.Rejection("surface", f"exported surface differs from its build's: {diff}")
        return mod, None
    torch.ops.load_library(str(path))
    missing = sorted(set(recorded.get("ops") or ()) - surface.op_names())
    if missing:
        return None, validate.Rejection("surface", f"library did not register {missing}")
    return str(path), None
