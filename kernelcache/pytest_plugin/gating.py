"""GPU gating: the ``gpu(count, min_arch)`` marker against the hardware the controller saw.

Why the controller's answer: xdist workers must collect (and skip) identically, and a probe per
worker multiplies a possibly hanging ``nvidia-smi``. So the hardware is found once — a stand-in
from ``--kc-hardware`` or :func:`kernelcache.host.gpu.detect_gpus` under a time limit, never a CUDA
context — and travels to workers through ``workerinput``. Hardware stand-ins and the
requirement check live here; :mod:`kernelcache.host.gpu` only knows this machine's GPUs and archs.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

import pytest

from kernelcache.host import gpu

ITEM_GPU = pytest.StashKey[str]()  # why a gpu test cannot run here (under --kc-require-gpu)
DEFAULT_PROBE_TIMEOUT = 10.0


def find_hardware(hardware: str | None, env: Mapping[str, str]) -> dict:
    """The stand-in named by ``--kc-hardware``, else the detected GPUs."""
    try:
        hw = parse_hardware(hardware or "auto")
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
            problem = requirement_problem(hw, int(count), min_arch)
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


# -- stand-ins and requirements ---------------------------------------------------------------
def parse_hardware(value: str) -> dict | None:
    """Override for detection: ``auto`` -> None (detect); ``cpu``/``none``/``0``; ``2x9.0``;
    ``8.0,9.0`` (one arch per GPU); an optional ``cuda:`` prefix."""
    v = (value or "").strip().lower()
    if v in ("", "auto"):
        return None
    if v.startswith("cuda:"):
        v = v[5:]
    if v in ("cpu", "none", "0"):
        return {"count": 0, "gpus": [], "source": "override", "note": f"--kc-hardware={value}"}
    archs: list[str] = []
    for tok in v.replace(" ", "").split(","):
        if not tok:
            continue
        n, x, arch = tok.partition("x")
        archs += [arch] * int(n) if (x and n.isdigit()) else [tok]
    for a in archs:
        gpu.arch_tuple(a)  # validates (ArchError is a ValueError)
    gpus = [{"index": i, "name": "simulated", "arch": a, "memory_mib": None, "uuid": ""} for i, a in enumerate(archs)]
    return {"count": len(gpus), "gpus": gpus, "source": "override", "note": f"--kc-hardware={value}"}


def requirement_problem(hw: dict, count: int = 1, min_arch: Any = None) -> str | None:
    """Why ``hw`` does not satisfy ``gpu(count, min_arch)``; None when it does."""
    need = f"{count} GPU{'s' if count != 1 else ''}" + (f" with arch >= {min_arch}" if min_arch else "")
    gpus = hw.get("gpus", [])
    if not gpus:
        return f"needs {need}: no GPU found ({hw.get('note') or 'no GPU detected'})"
    if min_arch:
        want = gpu.arch_tuple(min_arch)
        ok = [g for g in gpus if gpu.arch_tuple(g["arch"]) >= want]
        if len(ok) < count:
            found = ", ".join(str(g["arch"]) for g in gpus)
            if len(gpus) >= count:
                return f"needs {need}: GPU arch too old (found {found})"
            return f"needs {need}: found {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} (arch {found})"
    if len(gpus) < count:
        return f"needs {need}: found only {len(gpus)}"
    return None
