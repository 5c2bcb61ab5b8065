"""GPUs without a CUDA context, arch parsing and target archs: one source for each fact.

Why no CUDA context: creating one costs hundreds of milliseconds and can hang on a broken
driver, and the plugin and the loader need these answers in processes that never launch a
kernel. ``nvidia-smi`` is run once, with a time limit, and ``CUDA_VISIBLE_DEVICES`` is honoured
the way the CUDA runtime honours it (stop at the first invalid entry).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from typing import Any, Literal

from ..base import process_state
from ..base.errors import ToolchainError
from . import toolchain

_memo: dict[tuple, dict] = {}


class ArchError(ToolchainError, ValueError):
    """An arch spelling that cannot be parsed (a ValueError too: it is bad input)."""
_memo_lock = threading.Lock()


def _forget_detection() -> None:
    with _memo_lock:
        _memo.clear()


process_state.register("gpu.detection", _forget_detection)


# -- arch parsing ------------------------------------------------------------------------------
def normalise_arch(token: Any) -> str:
    """``"9.0"``, ``"9.0a"``, ``"sm_90"``, ``"90a"``, ``9.0`` -> ``"9.0"`` / ``"9.0a"``."""
    t = str(token).strip().lower().replace("sm_", "").replace("compute_", "")
    if not t:
        raise ArchError("empty CUDA arch")
    if "." not in t:
        digits = "".join(c for c in t if c.isdigit())
        suffix = t[len(digits):]
        if len(digits) < 2 or not t.startswith(digits):
            raise ArchError(f"cannot parse CUDA arch {token!r} (expected e.g. 9.0, 9.0a, sm_90)")
        t = f"{digits[:-1]}.{digits[-1]}{suffix}"
    major, _, minor = t.partition(".")
    if not major.isdigit() or not minor or not minor[0].isdigit():
        raise ArchError(f"cannot parse CUDA arch {token!r} (expected e.g. 9.0, 9.0a, sm_90)")
    return t


def arch_tuple(arch: Any) -> tuple[int, int]:
    """Comparable (major, minor) of an arch in any accepted spelling."""
    major, _, minor = normalise_arch(arch).partition(".")
    return int(major), int("".join(c for c in minor if c.isdigit()))


def parse_arch_list(value: str) -> tuple[str, ...]:
    """``"8.0,9.0"`` / ``"sm_80 sm_90"`` / ``"8.0;9.0"`` -> sorted unique normalised archs."""
    toks = [t for t in str(value).replace(",", " ").replace(";", " ").split() if t]
    return tuple(sorted({normalise_arch(t) for t in toks}))


# -- detection ---------------------------------------------------------------------------------
def _visible_filter(gpus: list[dict], cvd: str | None) -> list[dict]:
    if cvd is None:
        return gpus
    keep: list[dict] = []
    for t in (t.strip() for t in cvd.split(",")):
        if not t:
            continue
        if t.lstrip("-").isdigit():
            if int(t) < 0:
                break  # the CUDA runtime stops at the first invalid index
            match = [g for g in gpus if g.get("index") == int(t)]
        else:
            match = [g for g in gpus if str(g.get("uuid", "")).startswith(t)]
        if not match:
            break
        keep += [g for g in match if g not in keep]
    return keep


def _query(smi: str, timeout: float) -> dict:
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=index,name,compute_cap,memory.total,uuid", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"gpus": [], "note": f"nvidia-smi timed out after {timeout:g}s"}
    except OSError as e:
        return {"gpus": [], "note": f"nvidia-smi failed: {e}"}
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        return {"gpus": [], "note": f"nvidia-smi exit {proc.returncode}: {err[0] if err else ''}".strip()}
    gpus = []
    for line in proc.stdout.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        try:
            mem = int(float(cols[3])) if len(cols) > 3 else None
        except ValueError:
            mem = None
        gpus.append({"index": int(cols[0]), "name": cols[1], "arch": cols[2], "memory_mib": mem,
                     "uuid": cols[4] if len(cols) > 4 else ""})
    return {"gpus": gpus, "note": ""}


def detect_gpus(timeout: float = 10.0, cuda_visible_devices: str | None | Literal[True] = True) -> dict:
    """GPUs visible to this process: ``{"count", "gpus": [{index, name, arch, memory_mib, uuid}],
    "source", "note"}``. Memoised per process (the answer does not change while it runs).

    ``cuda_visible_devices``: True reads ``CUDA_VISIBLE_DEVICES`` from the environment; a string
    or None states it explicitly.
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES") if cuda_visible_devices is True else cuda_visible_devices
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"count": 0, "gpus": [], "source": "nvidia-smi", "note": "nvidia-smi not found"}
    mkey = (smi, timeout)
    with _memo_lock:
        raw = _memo.get(mkey)
    if raw is None:
        raw = _query(smi, timeout)
        with _memo_lock:
            _memo[mkey] = raw
    gpus = _visible_filter(list(raw["gpus"]), cvd)
    note = raw["note"]
    if not gpus and not note:
        note = "CUDA_VISIBLE_DEVICES hides every GPU" if cvd is not None else "nvidia-smi lists no GPU"
    return {"count": len(gpus), "gpus": gpus, "source": "nvidia-smi", "note": note}


def visible_archs(timeout: float = 10.0) -> tuple[str, ...]:
    """Sorted unique archs of the visible GPUs (empty without a GPU)."""
    return tuple(sorted({normalise_arch(g["arch"]) for g in detect_gpus(timeout)["gpus"]}))


def target_archs(cuda_arch: str | None) -> tuple[str, ...]:
    """What CUDA kernels are built for: the setting (``Settings.cuda_arch``), else the visible GPUs."""
    if cuda_arch and cuda_arch.strip():
        return parse_arch_list(cuda_arch)
    archs = visible_archs()
    if not archs:
        raise ToolchainError(
            "no CUDA target arch: set KERNELCACHE_CUDA_ARCH (e.g. 9.0) or TVM_FFI_CUDA_ARCH_LIST; "
            "no visible GPU was found to detect it from"
        )
    return archs


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    return [f"-gencode=arch=compute_{a.replace('.', '')},code=sm_{a.replace('.', '')}" for a in archs]


def cuda_runtime_loadable(major: str) -> bool:
    """Can this host load ``libcudart.so.<major>`` (the runtime a prebuilt CUDA kernel links)?"""
    names = [f"libcudart.so.{major}"]
    try:
        names.append(os.path.join(toolchain.find_cuda_home(), "lib64", f"libcudart.so.{major}"))
    except ToolchainError:
        pass
    for n in names:
        try:
            ctypes.CDLL(n, mode=getattr(os, "RTLD_LAZY", 1))
            return True
        except OSError:
            continue
    return False
