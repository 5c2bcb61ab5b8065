"""A library loaded into the process that registers torch ops (``is_python_module=False``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.events import RejectCode
from ..base.spec import KernelSpec
from ..entry import validate
from . import surface
from .torch_common import TorchKind


class TorchLibrary(TorchKind):
    name = "torch_library"
    label = "torch extension (library)"
    report_label = "torch extension"
    recall_load = "torch_library"  # as load_checked below loads it

    def load_checked(self, spec: KernelSpec, recorded: dict, path: Path) -> tuple[Any, validate.Rejection | None]:
        import torch

        torch.ops.load_library(str(path))
        missing = sorted(set(recorded.get("ops") or ()) - surface.op_names())
        if missing:
            return None, validate.Rejection(RejectCode.SURFACE, f"library did not register {missing}")
        return str(path), None

    def surface(self, path: str, name: str) -> dict:
        import torch

        before = surface.op_names()
        torch.ops.load_library(path)
        return {"ops": sorted(surface.op_names() - before)}


KIND = TorchLibrary()
