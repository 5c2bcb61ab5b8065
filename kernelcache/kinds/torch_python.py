"""A torch pybind11 extension module (``torch.utils.cpp_extension.load(is_python_module=True)``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.events import RejectCode
from ..base.spec import KernelSpec
from ..entry import validate
from . import surface
from .torch_common import TorchKind


class TorchPython(TorchKind):
    name = "torch_python"
    label = "torch extension"
    report_label = "torch extension"
    recall_load = "torch_python"  # as load_checked below imports it (the identity was checked when recorded)
    light_surface = True  # its import needs torch's libraries, rarely torch's Python package

    def load_checked(self, spec: KernelSpec, recorded: dict, path: Path) -> tuple[Any, validate.Rejection | None]:
        mod = surface.import_path(spec.name, str(path))
        diff = surface.difference(recorded, surface.of_module(mod))
        if diff:
            return None, validate.Rejection(RejectCode.SURFACE, f"exported surface differs from its build's: {diff}")
        return mod, None

    def surface(self, path: str, name: str) -> dict:
        import torch  # noqa: F401 - the extension links libtorch_python

        return surface.of_module(surface.import_path(name, path))


KIND = TorchPython()
