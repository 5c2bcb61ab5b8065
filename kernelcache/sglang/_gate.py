"""Which SGLang ``load_jit`` calls the route takes, and why it leaves one to SGLang.

The route builds from the ``build.ninja`` text SGLang generates (``_lines``), but it resolves the
request itself the way ``load_jit`` does before generating it (``_request``). So it runs only on
the SGLang versions it was checked against, only on CUDA/CPU builds (ROCm, SAIL's hgcc and MUSA
builds rewrite sources or flags in steps the route does not mirror), without SGLang's
resource-usage report (which SGLang replays from its own ninja's output), and only where SGLang
and kernelcache would run the same compilers. Anything else goes to SGLang's own JIT, with one
line saying why (once per module and reason).
"""
from __future__ import annotations

import os
import sys
from typing import Any

TESTED_VERSIONS = ("0.5.23",)
_said: set[tuple[str, str]] = set()


def installed_version() -> str:
    """The installed SGLang's version, from its distribution metadata (no import of sglang)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except (PackageNotFoundError, ValueError):
        return "unknown"


def version_refusal() -> str | None:
    """Why the route cannot take any ``load_jit`` call of the installed SGLang (None: it can)."""
    version = installed_version()
    if version not in TESTED_VERSIONS:
        return f"SGLang {version} is not a version the route was tested with ({', '.join(TESTED_VERSIONS)})"
    return None


def envs() -> Any:
    """SGLang's own environment registry: its knobs read (and parsed) as SGLang reads them."""
    from sglang.srt.environ import envs as sglang_envs

    return sglang_envs


def call_refusal(loader: Any) -> str | None:
    """Why this call goes to SGLang's own JIT (None: the route takes it). ``loader``: SGLang's
    ``compile.loader`` module (the names it bound are the ones ``load_jit`` would use)."""
    from sglang.kernels.jit.utils import common

    if loader.is_hip_runtime():
        return "ROCm builds are not mirrored"
    if loader.is_sail_runtime():
        return "SAIL (hgcc) builds are not mirrored"
    if getattr(common, "is_musa_runtime", lambda: False)():
        return "MUSA builds are not mirrored"
    if envs().SGLANG_JIT_LOG_RESOURCE_USAGE.get():
        return "SGLANG_JIT_LOG_RESOURCE_USAGE is set (SGLang replays its own compiler output)"
    return None


def compiler_refusal(host: str, device: str | None) -> str | None:
    """Why kernelcache would not run the compilers SGLang's ninja file names (None: the same)."""
    from ..host import toolchain

    try:
        ours = toolchain.find_cxx()
    except Exception:  # noqa: BLE001 - no compiler here: entries still load (local, prebuilt, fleet)
        return None
    theirs = host if os.path.isabs(host) else (_which(host) or host)
    if os.path.realpath(theirs) != os.path.realpath(ours):
        return f"SGLang compiles with {host}, kernelcache would use {ours}"
    if device is not None:
        nvcc = os.path.join(toolchain.find_cuda_home(), "bin", "nvcc")
        if os.path.realpath(device) != os.path.realpath(nvcc):
            return f"SGLang compiles CUDA with {device}, kernelcache would use {nvcc}"
    return None


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def say(name: str, why: str) -> None:
    """One line on stderr, once per module and reason."""
    if (name, why) in _said:
        return
    _said.add((name, why))
    print(f"kernelcache.sglang: {name}: SGLang's own JIT builds it ({why})", file=sys.stderr)


def _reset() -> None:
    _said.clear()


from ..base import process_state  # noqa: E402 - registered once the reset exists

process_state.register("sglang.said", _reset)
