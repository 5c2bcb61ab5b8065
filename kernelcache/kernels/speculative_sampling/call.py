"""The call path of ``tree_speculative_sampling_target_only``: the built module, launch
configuration, the torch custom op, and the public function with its eager fast path.

Eager calls with plain torch tensors take the fast path: a few type checks, then one tvm-ffi
call that validates every argument in C++ (same exceptions and messages as ``checks.validate``),
picks the split count and launches. While torch.compile traces, under a torch dispatch /
function mode, or for tensor subclasses, calls go through the torch custom op instead, after
the Python checks. The kernel is built (or loaded) on first use; torch is imported only then.
"""
# NOTE: no ``from __future__ import annotations``: the generated public function's annotations
# must be real types (torch.compile and inspect read them).
import linecache
import threading
from typing import Any, Callable, Dict, Optional

from kernelcache.base import process_state

from .. import config
from .checks import reraise, validate
from .spec import ALLOC_FN_NAME, ARG_NAMES, ARGS, AUTO_FN_NAME, FN_NAME, OP_NAME, SCALARS, spec, torch_op_schema

# must match kChunk in kernelcache/csrc/speculative_sampling/tree_sampling.cuh
CHUNK = 1024
# kernel-1 blocks (256 threads) aimed for per SM; must match kTargetBlocksPerSm in tree_sampling.cu
TARGET_BLOCKS_PER_SM = 2  # best overall in the H200 sweep (benchmarks/RESULTS.md)
# eager calls (no graph capture) use one fused launch up to this many chunks per row and this
# many chunks per batch; must match kEagerFusedMaxChunks / kEagerFusedMaxWork in tree_sampling.cu
EAGER_FUSED_MAX_CHUNKS = 48
EAGER_FUSED_MAX_WORK = 3072


# ---------------------------------------------------------------------------------------------
# What this process has loaded (one object; forgotten by kernelcache.reset_process_state())
# ---------------------------------------------------------------------------------------------
class Runtime:
    """The built module, its functions (a lookup costs about a microsecond, so once), SM counts,
    whether tvm-ffi calls see torch's allocator, and the registered torch op."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.module: Any = None
            self.functions: Dict[str, Any] = {}
            self.sm_counts: Dict[int, int] = {}
            self.env_alloc: Optional[bool] = None
            self.op: Any = None


runtime = Runtime()


def module() -> Any:
    """The kernel's tvm-ffi module, built (or loaded from the cache) on first use with the
    kernels' settings (``kernelcache.kernels.configure``)."""
    mod = runtime.module
    if mod is None:
        with runtime.lock:
            if runtime.module is None:
                import kernelcache as kc

                settings = config.configured()
                runtime.module = kc.load(spec(settings), settings=settings)
            mod = runtime.module
    return mod


def function(name: str) -> Any:
    """An exported tvm-ffi function, looked up once."""
    fn = runtime.functions.get(name)
    if fn is None:
        fn = runtime.functions[name] = module()[name]
    return fn


# ---------------------------------------------------------------------------------------------
# Launch configuration (mirrors of the C++ choices; the C++ entry point decides)
# ---------------------------------------------------------------------------------------------
def num_sms(device: Any) -> int:
    idx = device.index if device.index is not None else 0
    n = runtime.sm_counts.get(idx)
    if n is None:
        import torch

        n = runtime.sm_counts[idx] = int(torch.cuda.get_device_properties(idx).multi_processor_count)
    return n


def choose_num_splits(bs: int, vocab: int, num_sms: int, blocks_per_sm: Optional[int] = None,
                      eager: bool = False) -> int:
    """Kernel-1 blocks per request (what the C++ entry point chooses): enough blocks to fill the
    GPU, one per request once the batch alone fills it, at most one per vocabulary chunk of 1024
    entries (small batches with large vocabularies get many blocks per row). Eager calls (no
    graph capture) fuse small rows into one launch (at most EAGER_FUSED_MAX_CHUNKS chunks per
    row and EAGER_FUSED_MAX_WORK per batch): there a second launch costs more than it saves.
    One split means one fused launch without a workspace."""
    if bs <= 0 or vocab <= 0:
        return 1
    chunks = -(-vocab // CHUNK)
    sms = max(num_sms, 1)
    if bs >= sms:
        return 1
    if eager and chunks <= EAGER_FUSED_MAX_CHUNKS and bs * chunks <= EAGER_FUSED_MAX_WORK:
        return 1
    per_sm = TARGET_BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm
    want = -(-(per_sm * sms) // bs)
    return max(1, min(chunks, want))


def workspace_numel(bs: int, vocab: int) -> int:
    """int64 workspace elements the split path needs (mirrors tree_speculative_sampling_workspace_numel)."""
    return bs * (4 + -(-vocab // CHUNK))


# ---------------------------------------------------------------------------------------------
# Direct launch (eager) and the torch custom op (torch.compile / dispatch modes / subclasses)
# ---------------------------------------------------------------------------------------------
def env_allocator_available() -> bool:
    """Whether tvm-ffi calls with torch tensors get torch's allocator in their environment
    (torch's DLPack C exchange API); then the C++ entry point allocates its own workspace."""
    if runtime.env_alloc is None:
        import torch

        runtime.env_alloc = bool(function(ALLOC_FN_NAME)(torch.empty(0)))
    return runtime.env_alloc


def launch(*args: Any) -> None:
    """Launch on validated arguments (``spec.ARGS`` tensors, then the three scalars): the custom
    op's implementation and the eager fallback."""
    n = len(ARG_NAMES)
    tensors = args[:n]
    threshold_single, threshold_acc, deterministic = args[n:]
    args = (*tensors, float(threshold_single), float(threshold_acc), bool(deterministic))
    if env_allocator_available():
        function(AUTO_FN_NAME)(*args)
        return
    import torch

    named = dict(zip(ARG_NAMES, tensors))
    candidates, target_probs = named["candidates"], named["target_probs"]
    bs, V = candidates.shape[0], target_probs.shape[2]
    if bs == 0:
        return
    splits = choose_num_splits(bs, V, num_sms(target_probs.device))
    ws = torch.empty(workspace_numel(bs, V), dtype=torch.int64, device=target_probs.device)
    function(FN_NAME)(*args, ws, splits)


def register_op() -> Any:
    """``torch.ops.kernelcache.tree_speculative_sampling_target_only.default`` (registered once,
    schema from ``spec.ARGS``: the four written tensors are marked mutated), with a fake
    implementation for tracing."""
    if runtime.op is not None:
        return runtime.op
    with runtime.lock:
        if runtime.op is not None:
            return runtime.op
        import torch

        try:  # registered already (an earlier Runtime of this process, a reloaded module)
            torch.ops.kernelcache.tree_speculative_sampling_target_only.default
            already = True
        except (AttributeError, RuntimeError):
            already = False
        if not already:
            written = tuple(a.name for a in ARGS if a.written)
            op = torch.library.custom_op(OP_NAME, launch, mutates_args=written, schema=torch_op_schema())
            op.register_fake(lambda *args: None)
        runtime.op = torch.ops.kernelcache.tree_speculative_sampling_target_only.default
        return runtime.op


def ensure_op_registered() -> bool:
    register_op()
    return True


# Run by dynamo at trace time with its result taken as a constant (the mark that
# torch.compiler.assume_constant_result sets; set here so that torch is not imported), so the
# custom op exists before the trace resolves it even when the very first call is being traced.
ensure_op_registered._dynamo_marked_constant = True  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------------------------
class FastPath:
    """What the fast path checks, filled once by :meth:`enable` (torch is imported by then).
    ``fn`` stays None when tvm-ffi calls do not see torch's allocator (no DLPack C API)."""

    __slots__ = ("fn", "tensor", "is_compiling", "fn_mode_on", "dispatch_modes", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.fn: Any = None
        self.tensor: Any = None
        self.is_compiling: Optional[Callable[[], bool]] = None
        self.fn_mode_on: Optional[Callable[[], bool]] = None
        self.dispatch_modes: Optional[Callable[[], int]] = None

    def enable(self) -> None:
        if self.tensor is not None:
            return
        with self.lock:
            if self.tensor is not None:
                return
            import torch

            fn = function(AUTO_FN_NAME)  # builds / loads the module
            register_op()  # registered before any torch.compile trace needs it
            self.is_compiling = torch.compiler.is_compiling
            self.fn_mode_on = torch._C._is_torch_function_mode_enabled
            self.dispatch_modes = torch._C._len_torch_dispatch_stack
            if env_allocator_available():
                self.fn = fn
            self.tensor = torch.Tensor


fast = FastPath()


def general_call(tensors: tuple, threshold_single, threshold_acc, deterministic) -> None:
    """Python checks, then a direct launch (plain tensors, eager) or the custom op."""
    import torch

    if torch.compiler.is_compiling():
        validate(*tensors, threshold_single, threshold_acc, deterministic)
        ensure_op_registered()
        torch.ops.kernelcache.tree_speculative_sampling_target_only.default(
            *tensors, float(threshold_single), float(threshold_acc), bool(deterministic))
        return
    validate(*tensors, threshold_single, threshold_acc, deterministic)
    fast.enable()
    if (all(type(t) is torch.Tensor for t in tensors) and not torch._C._is_torch_function_mode_enabled()
            and torch._C._len_torch_dispatch_stack() == 0):
        launch(*tensors, threshold_single, threshold_acc, deterministic)
    else:
        register_op()(*tensors, float(threshold_single), float(threshold_acc), bool(deterministic))


# The public function is generated from spec.ARG_NAMES (as dataclasses generate __init__): its
# signature must name every argument (SGLang's API), and its fast path must stay a flat chain of
# ``type(x) is T`` tests with no tuple built before the call, which a loop cannot give.
_PUBLIC = '''\
def {fn}({params}, {scalars}) -> None:
    """Verify a draft token tree against the target distribution (SGLang's op, G3 semantics).

    Writes ``predicts``, ``accept_index``, ``accept_token_num`` and (the rejected candidates'
    entries of) ``draft_probs`` in place; see docs/tree_speculative_sampling.md. Inputs are
    validated before anything is launched; bad inputs raise ``ValueError`` / ``TypeError``.
    Runs on the current CUDA stream; safe under torch.compile and CUDA graph capture.
    """
    st = fast
    fn = st.fn
    T = st.tensor
    if (
        fn is not None
        and not st.is_compiling()
        and {type_checks}
        and type(threshold_single) is float and 0.0 <= threshold_single <= 1.0
        and type(threshold_acc) is float and 0.0 <= threshold_acc <= 1.0
        and type(deterministic) is bool
        and not st.fn_mode_on() and st.dispatch_modes() == 0
    ):
        try:
            fn({args}, threshold_single, threshold_acc, deterministic)
        except Exception as exc:  # the same exception as the general path's Python checks
            reraise(exc, ({args}, threshold_single, threshold_acc, deterministic))
        return
    general_call(({args},), threshold_single, threshold_acc, deterministic)
'''


def _generate_public() -> Callable[..., None]:
    src = _PUBLIC.format(
        fn=FN_NAME,
        params=", ".join(ARG_NAMES),
        scalars=", ".join(f"{n}: {t.__name__} = {d!r}" for n, t, d in SCALARS),
        type_checks=" and ".join(f"type({n}) is T" for n in ARG_NAMES),
        args=", ".join(ARG_NAMES),
    )
    filename = f"<kernelcache.kernels.speculative_sampling.call: generated {FN_NAME}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # tracebacks show it
    namespace: Dict[str, Any] = {"fast": fast, "reraise": reraise, "general_call": general_call}
    exec(compile(src, filename, "exec"), namespace)
    public = namespace[FN_NAME]
    public.__module__ = "kernelcache.kernels.speculative_sampling"
    return public


tree_speculative_sampling_target_only = _generate_public()


def _forget() -> None:
    """Forget the loaded module, its functions and the fast path (a torch op stays registered:
    torch cannot unregister one, and register_op() finds it again)."""
    with fast.lock:
        fast.reset()
    runtime.reset()


process_state.register("kernels.speculative_sampling.runtime", _forget)
