"""What the torch kinds share: the surface subprocess of a fresh build, identity before import.

Right after a build, before anything is published, the binary is loaded in a subprocess that
records its exported surface (``kernelcache.kinds.surface``); a module that cannot be imported there
is a build error (command, output, exit status) and is never cached. At admission the identity
nonce is read *before* the module's Python code runs (ctypes), then the module is imported or
the library loaded, and what it exports is compared with the surface recorded for these bytes.

A kind with ``light_surface`` first asks a light child (``surface.light_main``: torch's
libraries loaded, not its Python package, ~1 s instead of ``import torch``'s 1-4 s); when that
child fails, the full child decides (a module that needs torch's Python side at import).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..base.errors import BuildError
from ..base.events import RejectCode
from ..base.spec import KernelSpec
from ..entry import validate
from ..entry.manifest import Manifest
from .base import Kind

SURFACE_TIMEOUT_S = 600.0
_PKG_PARENT = str(Path(__file__).resolve().parent.parent.parent)
# Imports torch, then reads the path of the linked binary from stdin (empty line: exit quietly).
_RUNNER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import torch; "
           "path = sys.stdin.readline().strip(); "
           "from kernelcache.kinds import surface_main; "
           "raise SystemExit(surface_main([sys.argv[1], path, sys.argv[2]]) if path else 0)")
# Loads torch's libraries (argv: LIB NAME), not torch; reads the binary's path from stdin.
_LIGHT_RUNNER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from kernelcache.kinds.surface import light_main; "
                 "raise SystemExit(light_main(sys.argv[1:], sys.stdin.readline().strip()))")


def _torch_python_lib() -> str | None:
    """``libtorch_python`` of the torch this process imported (None: no such file; the full child)."""
    torch = sys.modules.get("torch")
    lib = os.path.join(os.path.dirname(getattr(torch, "__file__", None) or ""), "lib", "libtorch_python.so")
    return lib if torch is not None and os.path.isfile(lib) else None


def _child(argv: list[str], so_path: Path, name: str) -> tuple[int | None, str, str]:
    """Run one surface child: (exit status, stdout, stderr); a child past the timeout is killed."""
    proc = subprocess.Popen([sys.executable, "-c", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(str(so_path) + "\n", timeout=SURFACE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BuildError(name, "<import check>", "importing the built module timed out") from None
    return proc.returncode, stdout, stderr


def _surface_line(stdout: str) -> str | None:
    return next((ln for ln in stdout.splitlines() if ln.startswith("KC_SURFACE ")), None)


class TorchKind(Kind):
    """A binary that links libtorch, checked by its exported surface."""

    light_surface = False  # a light child first (``surface.light_main``)
    # links libtorch, never tvm-ffi: tvm-ffi's version is no part of its keys or admission
    checks = validate.BinaryChecks(tvm_ffi=False)

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        """Load the binary in a subprocess; record what it exports: the light child when this
        kind allows it (torch's libraries, not torch), else or when it fails the full one
        (imports torch first). Started after the link, not beside the compiler: on a busy
        machine a concurrent torch import slowed the compile down by more than it saved
        (measured, benchmarks/RESULTS.md)."""
        lib = _torch_python_lib() if self.light_surface else None
        if lib is not None:
            rc, stdout, _stderr = _child([_LIGHT_RUNNER, _PKG_PARENT, lib, spec.name], so_path, spec.name)
            line = _surface_line(stdout)
            if rc == 0 and line is not None:
                return {}, json.loads(line[len("KC_SURFACE "):])
        rc, stdout, stderr = _child([_RUNNER, _PKG_PARENT, self.name, spec.name], so_path, spec.name)
        line = _surface_line(stdout)
        if rc != 0 or line is None:
            raise BuildError(spec.name, f"<import check: {self.name} {so_path}>",
                             "the built module does not load:\n" + stderr + stdout, rc)
        return {}, json.loads(line[len("KC_SURFACE "):])

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
        import torch  # noqa: F401 - the binary links libtorch: its libraries must be loaded first

        ident = validate.read_identity(path)  # dlopen by ctypes: no Python code of the module runs
        if ident != m.identity:
            return None, validate.Rejection(RejectCode.IDENTITY, f"identity {ident!r} != manifest's {m.identity!r} "
                                                        "(binary of another build)")
        return self.load_checked(spec, m.surface or {}, path)

    def load_checked(self, spec: KernelSpec, recorded: dict, path: Path) -> tuple[Any, validate.Rejection | None]:
        """Load the binary whose identity was checked; compare its surface with ``recorded``."""
        raise NotImplementedError
