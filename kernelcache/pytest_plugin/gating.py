"""GPU gating: the ``gpu(count, min_arch)`` marker against the hardware the controller saw.

Why the controller's answer: xdist workers must collect (and skip) identically, and a probe per
worker multiplies a possibly hanging ``nvidia-smi``. So the hardware is found once — a stand-in
from ``--kc-hardware`` or :func:`kernelcache.gpu.detect_gpus` under a time limit, never a CUDA
context — and travels to workers through ``workerinput``. The facts and the requirement check
themselves live in :mod:`kernelcache.gpu`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

import pytest

from kernelcache import gpu

ITEM_GPU = pytest.StashKey[str]()  # why a gpu test cannot run here (under --kc-require-gpu)
DEFAULT_PROBE_TIMEOUT = 10.0


def find_hardware(hardware: str | None, env: Mapping[str, str]) -> dict:
    """The stand-in named by ``--kc-hardware``, else the detected GPUs."""
    try:
        hw = gpu.parse_hardware(hardware or "auto")
    except ValueError as e:
        raise pytest.UsageError(f"kernelcache: --kc-hardware / KERNELCACHE_HARDWARE: {e}") from None
    if hw is not None:
        return hw
    raw = (env.get("KERNELCACHE_GPU_PROBE_TIMEOUT") or "").strip()
    try:
        timeout = float(raw) if raw else DEFAULT_PROBE_TIMEOUT
    except ValueError:
        raise pytest.UsageError("KERNELCACHE_GPU_PROBE_TIMEOUT must be a number of seconds") from None
    return gpu.detect_gpus(timeout=timeout)


def detected_archs(hw: dict) -> tuple[str, ...]:
    """Archs of really detected GPUs (a stand-in names hardware this machine lacks: none)."""
    if hw.get("source") == "override":
        return ()
    return tuple(sorted({str(g["arch"]) for g in hw.get("gpus", [])}))


def gate(items: Iterable[pytest.Item], hw: dict, require_gpu: bool) -> None:
    """Skip (or, under ``--kc-require-gpu``, mark for a setup error) tests whose ``gpu``
    requirement this hardware does not meet; the reason is specific."""
    for item in items:
        m = item.get_closest_marker("gpu")
        if m is None:
            continue
        count = m.kwargs.get("count", m.args[0] if m.args else 1)
        min_arch = m.kwargs.get("min_arch", m.args[1] if len(m.args) > 1 else None)
        try:
            problem = gpu.requirement_problem(hw, int(count), min_arch)
        except ValueError as e:
            raise pytest.UsageError(f"{item.nodeid}: bad gpu() marker: {e}") from None
        if not problem:
            continue
        if require_gpu:
            item.stash[ITEM_GPU] = problem
        else:
            item.add_marker(pytest.mark.skip(reason=f"gpu: {problem}"))


def fail_if_required(item: pytest.Item) -> None:
    """At setup: a gpu test that cannot run here errors under ``--kc-require-gpu``."""
    problem = item.stash.get(ITEM_GPU, None)
    if problem:
        pytest.fail(f"kernelcache --kc-require-gpu: gpu: {problem}", pytrace=False)


def require_gpu_failures(hw: dict, tests: Iterable[dict]) -> list[str]:
    """Policy failures of ``--kc-require-gpu``: no GPU at all, or every gpu test skipped."""
    if not hw.get("gpus"):
        return [f"--kc-require-gpu: no GPU detected ({hw.get('note')})"]
    gpu_tests = [t for t in tests if t["gpu"]]
    if gpu_tests and all(t["outcome"] == "skipped" for t in gpu_tests):
        return [f"--kc-require-gpu: all {len(gpu_tests)} gpu-marked test(s) were skipped"]
    return []


def describe(hw: dict) -> str:
    """``1x NVIDIA H200 (arch 9.0)`` / ``none (nvidia-smi not found)``."""
    gpus: list[dict[str, Any]] = hw.get("gpus", [])
    if not gpus:
        return f"none ({hw.get('note') or 'no GPU detected'})"
    names = Counter(f"{g['name']} (arch {g['arch']})" for g in gpus)
    return ", ".join(f"{n}x {k}" for k, n in names.items()) + (
        f" [{hw.get('note')}]" if hw.get("source") == "override" else "")
