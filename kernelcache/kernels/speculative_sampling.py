"""``tree_speculative_sampling_target_only``: tree speculative sampling (target-only), CUDA.

Implements behaviour G3 of ``docs/specs/tree_speculative_sampling.md`` (see
``docs/tree_speculative_sampling.md``). Same argument names, order and defaults as SGLang's op.
The kernel is built through kernelcache on first use; torch is imported only then, and the torch
custom op ``torch.ops.kernelcache.tree_speculative_sampling_target_only`` is registered then too.

Eager calls with plain torch tensors take a fast path: a few type checks here, then one tvm-ffi
call that validates every argument in C++ (same exceptions and messages as the Python checks in
``speculative_sampling_op.validate``), picks the split count, and launches. While torch.compile
traces, under a torch dispatch / function mode, or for tensor subclasses, calls go through the
torch custom op instead, after the Python validation.
"""
import threading
from typing import Any

from . import speculative_sampling_op as _op
from .speculative_sampling_op import (  # noqa: F401  (re-exported)
    ALLOC_FN_NAME,
    AUTO_FN_NAME,
    FN_NAME,
    FUNCTIONS,
    KERNEL_NAME,
    OP_NAME,
    SPLITS_FN_NAME,
    WS_FN_NAME,
    choose_num_splits,
    workspace_numel,
)
from .speculative_sampling_spec import curand_include_dirs, flashinfer_include_dir, spec  # noqa: F401

# ---------------------------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------------------------
# Fast-path state, filled once by _enable_fast_path() (torch is imported by then). _fast stays
# None when tvm-ffi calls do not see torch's allocator (no DLPack C exchange API).
_fast: Any = None
_Tensor: Any = None
_is_compiling: Any = None
_fn_mode_on: Any = None
_dispatch_modes: Any = None
_fast_lock = threading.Lock()


def _enable_fast_path() -> None:
    global _fast, _Tensor, _is_compiling, _fn_mode_on, _dispatch_modes
    if _Tensor is not None:
        return
    with _fast_lock:
        if _Tensor is not None:
            return
        import torch

        fn = _op.function(AUTO_FN_NAME)  # builds / loads the module
        _op.register_op()  # registered before any torch.compile trace needs it
        _is_compiling = torch.compiler.is_compiling
        _fn_mode_on = torch._C._is_torch_function_mode_enabled
        _dispatch_modes = torch._C._len_torch_dispatch_stack
        if _op.env_allocator_available():
            _fast = fn
        _Tensor = torch.Tensor


def _ensure_op_registered() -> bool:
    _op.register_op()
    return True


# Run by dynamo at trace time with its result taken as a constant (the mark that
# torch.compiler.assume_constant_result sets; set here so that torch is not imported), so the
# custom op exists before the trace resolves it even when the very first call is being traced.
_ensure_op_registered._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _general_call(tensors: tuple, threshold_single, threshold_acc, deterministic) -> None:
    """Validation in Python, then a direct launch (plain tensors, eager) or the custom op."""
    import torch

    if torch.compiler.is_compiling():
        _op.validate(*tensors, threshold_single, threshold_acc, deterministic)
        _ensure_op_registered()
        torch.ops.kernelcache.tree_speculative_sampling_target_only.default(
            *tensors, float(threshold_single), float(threshold_acc), bool(deterministic))
        return
    _op.validate(*tensors, threshold_single, threshold_acc, deterministic)
    _enable_fast_path()
    if (all(type(t) is torch.Tensor for t in tensors) and not torch._C._is_torch_function_mode_enabled()
            and torch._C._len_torch_dispatch_stack() == 0):
        _op.launch(*tensors, threshold_single, threshold_acc, deterministic)
    else:
        _op.register_op()(*tensors, float(threshold_single), float(threshold_acc), bool(deterministic))


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
    fn = _fast
    T = _Tensor
    if (
        fn is not None
        and not _is_compiling()
        and type(predicts) is T and type(accept_index) is T and type(accept_token_num) is T
        and type(candidates) is T and type(retrive_index) is T and type(retrive_next_token) is T
        and type(retrive_next_sibling) is T and type(uniform_samples) is T
        and type(uniform_samples_for_final_sampling) is T and type(target_probs) is T
        and type(draft_probs) is T
        and type(threshold_single) is float and 0.0 <= threshold_single <= 1.0
        and type(threshold_acc) is float and 0.0 <= threshold_acc <= 1.0
        and type(deterministic) is bool
        and not _fn_mode_on() and _dispatch_modes() == 0
    ):
        try:
            fn(predicts, accept_index, accept_token_num, candidates, retrive_index,
               retrive_next_token, retrive_next_sibling, uniform_samples,
               uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
               threshold_acc, deterministic)
        except Exception as exc:  # the same exception as the general path's Python validation
            _op.reraise(exc, (predicts, accept_index, accept_token_num, candidates, retrive_index,
                              retrive_next_token, retrive_next_sibling, uniform_samples,
                              uniform_samples_for_final_sampling, target_probs, draft_probs),
                        threshold_single, threshold_acc, deterministic)
        return
    _general_call(
        (predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
         retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
         draft_probs),
        threshold_single, threshold_acc, deterministic,
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
