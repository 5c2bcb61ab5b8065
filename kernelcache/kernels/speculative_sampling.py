"""``tree_speculative_sampling_target_only``: tree speculative sampling (target-only), CUDA.

Implements behaviour G3 of ``specs/tree_speculative_sampling.md`` (see
``docs/tree_speculative_sampling.md``). Same argument names, order and defaults as SGLang's op.
The kernel is built through kernelcache on first use; torch is imported only then, and the torch
custom op ``torch.ops.kernelcache.tree_speculative_sampling_target_only`` is registered then too.
"""
# NOTE: no ``from __future__ import annotations``: torch.library infers the op schema from the
# annotations of the registered function, which must be real types.
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import KernelSpec, ToolchainError

KERNEL_NAME = "tree_speculative_sampling"
OP_NAME = "kernelcache::tree_speculative_sampling_target_only"
FN_NAME = "tree_speculative_sampling_target_only"
WS_FN_NAME = "tree_speculative_sampling_workspace_numel"

#: expected tvm-ffi schemas of the exported functions (checked by the loader)
FUNCTIONS = {
    FN_NAME: "Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
    "Tensor, Tensor, float, float, bool, Tensor, int], None]",
    WS_FN_NAME: "Callable[[int, int], int]",
}

_CSRC = Path(__file__).resolve().parent.parent / "csrc"

# must match kChunk in kernelcache/csrc/speculative_sampling/tree_sampling.cuh
_CHUNK = 1024
# kernel-1 blocks (256 threads) aimed for per SM; the benchmark sweeps this
_TARGET_BLOCKS_PER_SM = 2  # best overall in the H200 sweep (benchmarks/RESULTS.md)


# ---------------------------------------------------------------------------------------------
# Header discovery and the KernelSpec
# ---------------------------------------------------------------------------------------------
def flashinfer_include_dir() -> str:
    """FlashInfer's include dir: $KERNELCACHE_FLASHINFER_INCLUDE, else the installed
    flashinfer-python wheel's ``flashinfer/data/include`` (found without importing flashinfer)."""
    env = os.environ.get("KERNELCACHE_FLASHINFER_INCLUDE")
    if env:
        if not (Path(env) / "flashinfer" / "sampling.cuh").is_file():
            raise ToolchainError(
                f"KERNELCACHE_FLASHINFER_INCLUDE={env} does not contain flashinfer/sampling.cuh; "
                "point it at a FlashInfer include dir or unset it and `pip install flashinfer-python`"
            )
        return str(Path(env).resolve())
    try:
        spec = importlib.util.find_spec("flashinfer")
    except (ImportError, ValueError):
        spec = None
    for loc in list(getattr(spec, "submodule_search_locations", None) or []):
        inc = Path(loc) / "data" / "include"
        if (inc / "flashinfer" / "sampling.cuh").is_file():
            return str(inc.resolve())
    raise ToolchainError(
        "tree_speculative_sampling needs FlashInfer's CUDA headers (flashinfer/sampling.cuh): "
        "`pip install flashinfer-python` (only its headers are used; it is never imported), "
        "or set KERNELCACHE_FLASHINFER_INCLUDE to a directory containing flashinfer/sampling.cuh"
    )


def _cuda_home() -> Optional[str]:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(var)
        if v:
            return v
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


def curand_include_dirs() -> List[str]:
    """Extra include dirs for curand headers: none when the CUDA toolkit has them, else the
    ``nvidia-curand`` wheel's include dir."""
    home = _cuda_home()
    if home and (Path(home) / "include" / "curand.h").is_file():
        return []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for loc in list(getattr(spec, "submodule_search_locations", None) or []):
        for sub in ("cu13/include", "cu12/include", "curand/include"):
            inc = Path(loc) / sub
            if (inc / "curand.h").is_file():
                return [str(inc.resolve())]
    raise ToolchainError(
        "tree_speculative_sampling needs the curand headers (curand.h), which FlashInfer's "
        f"sampling.cuh includes; the CUDA toolkit at {home or '<not found>'} has none: "
        "`pip install nvidia-curand` (CUDA 13; `nvidia-curand-cu12` for CUDA 12) or install the "
        "toolkit's curand development package"
    )


def spec() -> KernelSpec:
    return KernelSpec(
        name=KERNEL_NAME,
        sources=["speculative_sampling/tree_sampling.cu"],
        root=_CSRC,
        system_include_dirs=[flashinfer_include_dir(), *curand_include_dirs()],
        cuda_cflags=["-DNDEBUG"],
        functions=dict(FUNCTIONS),
        backend="cuda",
    )


_mod_lock = threading.Lock()
_mod: Any = None


def _module() -> Any:
    global _mod
    if _mod is None:
        with _mod_lock:
            if _mod is None:
                import kernelcache as kc

                _mod = kc.load(spec())
    return _mod


# ---------------------------------------------------------------------------------------------
# Launch configuration
# ---------------------------------------------------------------------------------------------
_sm_counts: Dict[int, int] = {}


def _num_sms(device: Any) -> int:
    idx = device.index if device.index is not None else 0
    n = _sm_counts.get(idx)
    if n is None:
        import torch

        n = int(torch.cuda.get_device_properties(idx).multi_processor_count)
        _sm_counts[idx] = n
    return n


def choose_num_splits(bs: int, vocab: int, num_sms: int, blocks_per_sm: Optional[int] = None) -> int:
    """Kernel-1 blocks per request: enough blocks to fill the GPU, at most one per vocabulary
    chunk of 1024 entries (small batches with large vocabularies get many blocks per row)."""
    if bs <= 0 or vocab <= 0:
        return 1
    per_sm = _TARGET_BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm
    chunks = -(-vocab // _CHUNK)
    want = -(-(per_sm * max(num_sms, 1)) // bs)
    return max(1, min(chunks, want))


def workspace_numel(bs: int, vocab: int) -> int:
    """int64 workspace elements the kernel needs (mirrors tree_speculative_sampling_workspace_numel)."""
    return bs * (4 + -(-vocab // _CHUNK))


# ---------------------------------------------------------------------------------------------
# Validation (before any launch; raises ValueError / TypeError)
# ---------------------------------------------------------------------------------------------
_INT32 = "int32"
_INT64 = "int64"
_F32 = "float32"


def _validate(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
    draft_probs, threshold_single, threshold_acc, deterministic,
) -> None:
    import torch

    named = [
        ("predicts", predicts, torch.int32, None),
        ("accept_index", accept_index, torch.int32, 2),
        ("accept_token_num", accept_token_num, torch.int32, 1),
        ("candidates", candidates, torch.int64, 2),
        ("retrive_index", retrive_index, torch.int64, 2),
        ("retrive_next_token", retrive_next_token, torch.int64, 2),
        ("retrive_next_sibling", retrive_next_sibling, torch.int64, 2),
        ("uniform_samples", uniform_samples, torch.float32, 2),
        ("uniform_samples_for_final_sampling", uniform_samples_for_final_sampling, torch.float32, 1),
        ("target_probs", target_probs, torch.float32, 3),
        ("draft_probs", draft_probs, torch.float32, 3),
    ]
    for name, t, _, _ in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tree_speculative_sampling_target_only: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, v in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"tree_speculative_sampling_target_only: {name} must be a float, got {type(v).__name__}")
        if not (0.0 <= float(v) <= 1.0):
            raise ValueError(f"tree_speculative_sampling_target_only: {name} must be in [0, 1], got {v}")
    if not isinstance(deterministic, (bool, int)):
        raise TypeError("tree_speculative_sampling_target_only: deterministic must be a bool")
    for name, t, dtype, _ in named:
        if t.dtype != dtype:
            raise TypeError(f"tree_speculative_sampling_target_only: {name} must be {dtype}, got {t.dtype}")
    for name, t, _, ndim in named:
        if ndim is not None and t.dim() != ndim:
            raise ValueError(
                f"tree_speculative_sampling_target_only: {name} must be {ndim}-D, got shape {tuple(t.shape)}"
            )
    if predicts.dim() != 1:
        raise ValueError(
            f"tree_speculative_sampling_target_only: predicts must be 1-D, got shape {tuple(predicts.shape)}"
        )
    bs, N = candidates.shape
    S = accept_index.shape[1]
    V = target_probs.shape[2]
    expect = {
        "accept_index": (bs, S),
        "accept_token_num": (bs,),
        "retrive_index": (bs, N),
        "retrive_next_token": (bs, N),
        "retrive_next_sibling": (bs, N),
        "uniform_samples": (bs, N),
        "uniform_samples_for_final_sampling": (bs,),
        "target_probs": (bs, N, V),
        "draft_probs": (bs, N, V),
    }
    for name, t, _, _ in named:
        if name in expect and tuple(t.shape) != expect[name]:
            raise ValueError(
                f"tree_speculative_sampling_target_only: {name} must have shape {expect[name]} "
                f"(bs={bs}, N={N}, S={S}, V={V}), got {tuple(t.shape)}"
            )
    if predicts.shape[0] < bs * N:
        raise ValueError(
            f"tree_speculative_sampling_target_only: predicts has {predicts.shape[0]} elements, "
            f"needs at least bs*N = {bs * N}"
        )
    if bs > 0 and (N <= 0 or S <= 0 or V <= 0):
        raise ValueError(f"tree_speculative_sampling_target_only: need N, S, V > 0, got N={N} S={S} V={V}")
    if max(N, S, V) >= 2**31:
        raise ValueError("tree_speculative_sampling_target_only: N, S and V must each be < 2^31")
    for name, t, _, _ in named:
        if not t.is_contiguous():
            raise ValueError(f"tree_speculative_sampling_target_only: {name} must be contiguous")
    dev = target_probs.device
    for name, t, _, _ in named:
        if t.device.type != "cuda":
            raise ValueError(
                f"tree_speculative_sampling_target_only: {name} must be a CUDA tensor, got device {t.device}"
            )
        if t.device != dev:
            raise ValueError(
                f"tree_speculative_sampling_target_only: {name} is on {t.device} but target_probs is on {dev}"
            )


# ---------------------------------------------------------------------------------------------
# The torch custom op (registered on first use)
# ---------------------------------------------------------------------------------------------
_op_lock = threading.Lock()
_op: Any = None


def _launch(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
    draft_probs, threshold_single, threshold_acc, deterministic,
) -> None:
    import torch

    bs = candidates.shape[0]
    V = target_probs.shape[2]
    if bs == 0:
        return
    splits = choose_num_splits(bs, V, _num_sms(target_probs.device))
    workspace = torch.empty(workspace_numel(bs, V), dtype=torch.int64, device=target_probs.device)
    _module()[FN_NAME](
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, float(threshold_single), float(threshold_acc), bool(deterministic), workspace,
        splits,
    )


def _register_op() -> Any:
    global _op
    if _op is not None:
        return _op
    with _op_lock:
        if _op is not None:
            return _op
        import torch

        try:  # registered already (e.g. module reloaded in the same process)
            torch.ops.kernelcache.tree_speculative_sampling_target_only.default  # type: ignore[attr-defined]
            already = True
        except (AttributeError, RuntimeError):
            already = False
        if not already:

            @torch.library.custom_op(
                OP_NAME,
                mutates_args=("predicts", "accept_index", "accept_token_num", "draft_probs"),
            )
            def _op_impl(
                predicts: torch.Tensor,
                accept_index: torch.Tensor,
                accept_token_num: torch.Tensor,
                candidates: torch.Tensor,
                retrive_index: torch.Tensor,
                retrive_next_token: torch.Tensor,
                retrive_next_sibling: torch.Tensor,
                uniform_samples: torch.Tensor,
                uniform_samples_for_final_sampling: torch.Tensor,
                target_probs: torch.Tensor,
                draft_probs: torch.Tensor,
                threshold_single: float,
                threshold_acc: float,
                deterministic: bool,
            ) -> None:
                _launch(
                    predicts, accept_index, accept_token_num, candidates, retrive_index,
                    retrive_next_token, retrive_next_sibling, uniform_samples,
                    uniform_samples_for_final_sampling, target_probs, draft_probs,
                    threshold_single, threshold_acc, deterministic,
                )

            @_op_impl.register_fake
            def _op_fake(
                predicts, accept_index, accept_token_num, candidates, retrive_index,
                retrive_next_token, retrive_next_sibling, uniform_samples,
                uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
                threshold_acc, deterministic,
            ) -> None:
                return None

        _op = torch.ops.kernelcache.tree_speculative_sampling_target_only.default
        return _op


def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Verify a draft token tree against the target distribution (SGLang's op, G3 semantics).

    Writes ``predicts``, ``accept_index``, ``accept_token_num`` and (the rejected candidates'
    entries of) ``draft_probs`` in place; see docs/tree_speculative_sampling.md. Inputs are
    validated before anything is launched; bad inputs raise ``ValueError`` / ``TypeError``.
    Runs on the current CUDA stream; safe under torch.compile and CUDA graph capture.
    """
    _validate(
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, threshold_single, threshold_acc, deterministic,
    )
    op = _register_op()
    op(
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, float(threshold_single), float(threshold_acc), bool(deterministic),
    )


__all__ = [
    "spec",
    "tree_speculative_sampling_target_only",
    "flashinfer_include_dir",
    "curand_include_dirs",
    "choose_num_splits",
    "workspace_numel",
    "FUNCTIONS",
]
