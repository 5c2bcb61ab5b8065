"""Runtime half of ``tree_speculative_sampling_target_only``: the built module, the Python-side
validation (the reference for every error message), launch configuration, the torch custom op
(used while torch.compile traces) and the general call path.

The public function (``speculative_sampling.tree_speculative_sampling_target_only``) calls the
tvm-ffi entry point ``tree_speculative_sampling_target_only_auto`` directly on its fast path,
which validates everything in C++ with the messages below; this module is what it falls back to
for anything else. Nothing here imports torch or tvm_ffi at import time.
"""
# NOTE: no ``from __future__ import annotations``: torch.library infers the op schema from the
# annotations of the registered function, which must be real types.
import threading
from typing import Any, Dict, Optional

from .speculative_sampling_spec import (  # noqa: F401  (names of the exported functions)
    ALLOC_FN_NAME, AUTO_FN_NAME, FN_NAME, FUNCTIONS, KERNEL_NAME, OP_NAME, OPTIONS_FN_NAME, SPLITS_FN_NAME,
    WS_FN_NAME,
)

ARG_NAMES = (
    "predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
    "retrive_next_token", "retrive_next_sibling", "uniform_samples",
    "uniform_samples_for_final_sampling", "target_probs", "draft_probs",
)

# must match kChunk in kernelcache/csrc/speculative_sampling/tree_sampling.cuh
_CHUNK = 1024
# kernel-1 blocks (256 threads) aimed for per SM; must match kTargetBlocksPerSm in tree_sampling.cu
_TARGET_BLOCKS_PER_SM = 2  # best overall in the H200 sweep (benchmarks/RESULTS.md)
# eager calls (no graph capture) use one fused launch up to this many chunks per row and this
# many chunks per batch; must match kEagerFusedMaxChunks / kEagerFusedMaxWork in tree_sampling.cu
_EAGER_FUSED_MAX_CHUNKS = 48
_EAGER_FUSED_MAX_WORK = 3072


# ---------------------------------------------------------------------------------------------
# The built module and its functions (looked up once)
# ---------------------------------------------------------------------------------------------
_lock = threading.RLock()
_mod: Any = None
_fns: Dict[str, Any] = {}


def module() -> Any:
    """The kernel's tvm-ffi module, built (or loaded from the cache) on first use."""
    global _mod
    if _mod is None:
        with _lock:
            if _mod is None:
                import kernelcache as kc

                from .speculative_sampling_spec import spec

                _mod = kc.load(spec())
    return _mod


def function(name: str) -> Any:
    """An exported tvm-ffi function, looked up once (a lookup costs about a microsecond)."""
    fn = _fns.get(name)
    if fn is None:
        fn = _fns[name] = module()[name]
    return fn


# ---------------------------------------------------------------------------------------------
# Launch configuration (mirrors of the C++ choices; the C++ entry point decides)
# ---------------------------------------------------------------------------------------------
_sm_counts: Dict[int, int] = {}


def num_sms(device: Any) -> int:
    idx = device.index if device.index is not None else 0
    n = _sm_counts.get(idx)
    if n is None:
        import torch

        n = _sm_counts[idx] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return n


def choose_num_splits(bs: int, vocab: int, num_sms: int, blocks_per_sm: Optional[int] = None,
                      eager: bool = False) -> int:
    """Kernel-1 blocks per request (what the C++ entry point chooses): enough blocks to fill the
    GPU, one per request once the batch alone fills it, at most one per vocabulary chunk of 1024
    entries (small batches with large vocabularies get many blocks per row). Eager calls (no
    graph capture) fuse small rows into one launch (at most _EAGER_FUSED_MAX_CHUNKS chunks per
    row and _EAGER_FUSED_MAX_WORK per batch): there a second launch costs more than it saves.
    One split means one fused launch without a workspace."""
    if bs <= 0 or vocab <= 0:
        return 1
    chunks = -(-vocab // _CHUNK)
    sms = max(num_sms, 1)
    if bs >= sms:
        return 1
    if eager and chunks <= _EAGER_FUSED_MAX_CHUNKS and bs * chunks <= _EAGER_FUSED_MAX_WORK:
        return 1
    per_sm = _TARGET_BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm
    want = -(-(per_sm * sms) // bs)
    return max(1, min(chunks, want))


def workspace_numel(bs: int, vocab: int) -> int:
    """int64 workspace elements the split path needs (mirrors tree_speculative_sampling_workspace_numel)."""
    return bs * (4 + -(-vocab // _CHUNK))


# ---------------------------------------------------------------------------------------------
# Validation: the reference of every message (the C++ entry points raise the same ones)
# ---------------------------------------------------------------------------------------------
_P = "tree_speculative_sampling_target_only: "


def validate(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
    draft_probs, threshold_single, threshold_acc, deterministic,
) -> None:
    """Raise TypeError / ValueError for a bad argument (nothing is launched)."""
    import torch

    tensors = (predicts, accept_index, accept_token_num, candidates, retrive_index,
               retrive_next_token, retrive_next_sibling, uniform_samples,
               uniform_samples_for_final_sampling, target_probs, draft_probs)
    dtypes = (torch.int32,) * 3 + (torch.int64,) * 4 + (torch.float32,) * 4
    ndims = (None, 2, 1, 2, 2, 2, 2, 2, 1, 3, 3)
    named = list(zip(ARG_NAMES, tensors, dtypes, ndims))
    for name, t, _, _ in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_P}{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, v in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{_P}{name} must be a float, got {type(v).__name__}")
        if not (0.0 <= float(v) <= 1.0):
            raise ValueError(f"{_P}{name} must be in [0, 1], got {v}")
    if not isinstance(deterministic, (bool, int)):
        raise TypeError(f"{_P}deterministic must be a bool")
    for name, t, dtype, _ in named:
        if t.dtype != dtype:
            raise TypeError(f"{_P}{name} must be {dtype}, got {t.dtype}")
    for name, t, _, ndim in named:
        if ndim is not None and t.dim() != ndim:
            raise ValueError(f"{_P}{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if predicts.dim() != 1:
        raise ValueError(f"{_P}predicts must be 1-D, got shape {tuple(predicts.shape)}")
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
                f"{_P}{name} must have shape {expect[name]} (bs={bs}, N={N}, S={S}, V={V}), got {tuple(t.shape)}"
            )
    if predicts.shape[0] < bs * N:
        raise ValueError(f"{_P}predicts has {predicts.shape[0]} elements, needs at least bs*N = {bs * N}")
    if bs > 0 and (N <= 0 or S <= 0 or V <= 0):
        raise ValueError(f"{_P}need N, S, V > 0, got N={N} S={S} V={V}")
    if max(N, S, V) >= 2**31:
        raise ValueError(f"{_P}N, S and V must each be < 2^31")
    for name, t, _, _ in named:
        if not t.is_contiguous():
            raise ValueError(f"{_P}{name} must be contiguous")
    dev = target_probs.device
    for name, t, _, _ in named:
        if t.device.type != "cuda":
            raise ValueError(f"{_P}{name} must be a CUDA tensor, got device {t.device}")
        if t.device != dev:
            raise ValueError(f"{_P}{name} is on {t.device} but target_probs is on {dev}")


def reraise(exc: BaseException, tensors: tuple, threshold_single, threshold_acc, deterministic) -> None:
    """After the fast call raised ``exc``: raise the Python validation's error for these
    arguments (same type and message as the general path), else ``exc`` itself."""
    try:
        validate(*tensors, threshold_single, threshold_acc, deterministic)
    except (TypeError, ValueError) as err:
        raise err from None
    raise exc


# ---------------------------------------------------------------------------------------------
# Direct launch (eager) and the torch custom op (torch.compile / dispatch modes / subclasses)
# ---------------------------------------------------------------------------------------------
_env_alloc: Optional[bool] = None  # does the tvm-ffi call see torch's allocator (DLPack C API)?


def env_allocator_available() -> bool:
    """Whether tvm-ffi calls with torch tensors get torch's allocator in their environment
    (torch's DLPack C exchange API); then the C++ entry point allocates its own workspace."""
    global _env_alloc
    if _env_alloc is None:
        import torch

        _env_alloc = bool(function(ALLOC_FN_NAME)(torch.empty(0)))
    return _env_alloc


def launch(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
    draft_probs, threshold_single, threshold_acc, deterministic,
) -> None:
    """Launch on validated arguments (the custom op's implementation and the eager fallback)."""
    args = (predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            draft_probs, float(threshold_single), float(threshold_acc), bool(deterministic))
    if env_allocator_available():
        function(AUTO_FN_NAME)(*args)
        return
    import torch

    bs, V = candidates.shape[0], target_probs.shape[2]
    if bs == 0:
        return
    splits = choose_num_splits(bs, V, num_sms(target_probs.device))
    ws = torch.empty(workspace_numel(bs, V), dtype=torch.int64, device=target_probs.device)
    function(FN_NAME)(*args, ws, splits)


_op: Any = None


def register_op() -> Any:
    """``torch.ops.kernelcache.tree_speculative_sampling_target_only.default`` (registered once),
    with its four mutated arguments and a fake implementation."""
    global _op
    if _op is not None:
        return _op
    with _lock:
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
                launch(
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
