"""Anchors: machine-specific path prefixes written as ``${ROOT}``, ``${TVM_FFI}``, ``${SITE}``.

Keys and recorded dependencies name files relative to these anchors, so a checkout or a venv
that moved (another host of the fleet, a CI runner) computes the same keys and finds its entries.
"""
from __future__ import annotations

import os

from . import toolchain
from .plan import ROOT, BuildPlan
from .spec import KernelSpec

TVM_FFI = "${TVM_FFI}"
SITE = "${SITE}"  # site-packages: header-only dependencies (FlashInfer) relocate with the venv


# -- anchors ---------------------------------------------------------------------------------
def anchors_of(spec: KernelSpec) -> list[tuple[str, str]]:
    """(anchor, realpath prefix), longest prefix first.

    ``${SITE}`` is the site-packages directory holding tvm-ffi (where header-only packages
    such as FlashInfer live too); taken from tvm-ffi's path because asking sysconfig costs
    milliseconds per process.
    """
    tvm_dir = toolchain.tvm_ffi_paths().package_dir
    pairs = [(ROOT, str(spec.root)), (TVM_FFI, tvm_dir), (SITE, os.path.dirname(tvm_dir))]
    return sorted(pairs, key=lambda p: -len(p[1]))


def anchors_for(plan: BuildPlan) -> list[tuple[str, str]]:
    return anchors_of(plan.spec)


def anchor_path(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path == prefix or path.startswith(prefix + os.sep):
            return name + path[len(prefix):]
    return path


def resolve_anchor(path: str, anchors: list[tuple[str, str]]) -> str:
    for name, prefix in anchors:
        if path.startswith(name):
            return prefix + path[len(name):]
    return path


_BOUNDARY = set("/:;,= \t")


def anchor_text(text: str, anchors: list[tuple[str, str]]) -> str:
    """Anchor every occurrence of a prefix that ends at a path boundary (not /a in /abc)."""
    for name, prefix in anchors:
        start = 0
        while True:
            i = text.find(prefix, start)
            if i < 0:
                break
            j = i + len(prefix)
            if j == len(text) or text[j] in _BOUNDARY:
                text = text[:i] + name + text[j:]
                start = i + len(name)
            else:
                start = j
    return text
