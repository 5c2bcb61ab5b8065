"""The bad-input contract of ``tree_speculative_sampling_target_only``: the Python checks.

They are the reference of every message: the C++ entry point on the fast path raises the same
exception types, in the same order, with the same text (a test compares them one fault at a
time), and :func:`reraise` maps a fast-path failure back to the Python check's exception.
Nothing here imports torch at import time.
"""
from typing import Any

from .spec import ARGS, FN_NAME

PREFIX = f"{FN_NAME}: "
N_TENSORS = len(ARGS)


def validate(*args: Any) -> None:
    """Raise TypeError / ValueError for a bad argument list (the tensors of ``spec.ARGS`` in
    order, then threshold_single, threshold_acc, deterministic); nothing is launched."""
    import torch

    if len(args) != N_TENSORS + 3:
        raise TypeError(f"{PREFIX}takes {N_TENSORS + 3} arguments, got {len(args)}")
    tensors = args[:N_TENSORS]
    threshold_single, threshold_acc, deterministic = args[N_TENSORS:]
    named = [(a.name, t, getattr(torch, a.dtype), a.ndim) for a, t in zip(ARGS, tensors)]
    for name, t, _, _ in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{PREFIX}{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, v in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{PREFIX}{name} must be a float, got {type(v).__name__}")
        if not (0.0 <= float(v) <= 1.0):
            raise ValueError(f"{PREFIX}{name} must be in [0, 1], got {v}")
    if not isinstance(deterministic, (bool, int)):
        raise TypeError(f"{PREFIX}deterministic must be a bool")
    for name, t, dtype, _ in named:
        if t.dtype != dtype:
            raise TypeError(f"{PREFIX}{name} must be {dtype}, got {t.dtype}")
    for name, t, _, ndim in named:
        if ndim is not None and t.dim() != ndim:
            raise ValueError(f"{PREFIX}{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    by_name = {name: t for name, t, _, _ in named}
    predicts, candidates = by_name["predicts"], by_name["candidates"]
    if predicts.dim() != 1:
        raise ValueError(f"{PREFIX}predicts must be 1-D, got shape {tuple(predicts.shape)}")
    bs, N = candidates.shape
    S = by_name["accept_index"].shape[1]
    V = by_name["target_probs"].shape[2]
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
                f"{PREFIX}{name} must have shape {expect[name]} (bs={bs}, N={N}, S={S}, V={V}), got {tuple(t.shape)}"
            )
    if predicts.shape[0] < bs * N:
        raise ValueError(f"{PREFIX}predicts has {predicts.shape[0]} elements, needs at least bs*N = {bs * N}")
    if bs > 0 and (N <= 0 or S <= 0 or V <= 0):
        raise ValueError(f"{PREFIX}need N, S, V > 0, got N={N} S={S} V={V}")
    if max(N, S, V) >= 2**31:
        raise ValueError(f"{PREFIX}N, S and V must each be < 2^31")
    for name, t, _, _ in named:
        if not t.is_contiguous():
            raise ValueError(f"{PREFIX}{name} must be contiguous")
    dev = by_name["target_probs"].device
    for name, t, _, _ in named:
        if t.device.type != "cuda":
            raise ValueError(f"{PREFIX}{name} must be a CUDA tensor, got device {t.device}")
        if t.device != dev:
            raise ValueError(f"{PREFIX}{name} is on {t.device} but target_probs is on {dev}")


def reraise(exc: BaseException, args: tuple) -> None:
    """After the fast call raised ``exc`` for ``args``: raise the Python check's error for these
    arguments (same type and message as the general path), else ``exc`` itself."""
    try:
        validate(*args)
    except (TypeError, ValueError) as err:
        raise err from None
    raise exc
