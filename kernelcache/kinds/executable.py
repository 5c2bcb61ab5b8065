"""A standalone executable (``cpp_extension.load(is_standalone=True)``): run, never loaded here."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base.events import RejectCode
from ..base.spec import KernelSpec
from ..entry import validate
from ..entry.manifest import Manifest
from .base import Kind


class Executable(Kind):
    name = "executable"
    label = "torch extension (executable)"
    report_label = "torch extension"
    shared = False
    in_process = False  # its path is handed out, never dlopen'ed here
    recall_load = "path"
    checks = validate.BinaryChecks(tvm_ffi=False)  # links no tvm-ffi (a tvm-ffi bump changes nothing)

    def so_name(self, spec_name: str) -> str:
        return spec_name

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        return {}, {}  # nothing to import: the door reads its identity from its bytes

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
        with open(path, "rb") as f:  # the nonce is in its bytes; running it to ask would run user code
            if m.identity.encode() not in f.read():
                return None, validate.Rejection(RejectCode.IDENTITY, "executable does not hold its manifest's identity")
        if not os.access(path, os.X_OK):
            return None, validate.Rejection(RejectCode.BINARY, "executable is not executable")
        return str(path), None


KIND = Executable()
