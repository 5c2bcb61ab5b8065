"""``tree_speculative_sampling_target_only``: tree speculative sampling (target-only), CUDA.

Implements behaviour G3 of ``docs/specs/tree_speculative_sampling.md`` (see
``docs/tree_speculative_sampling.md``). Same argument names, order and defaults as SGLang's op.
The kernel is built through kernelcache on first use (with ``kernelcache.kernels.configure``'s
settings); torch is imported only then, and the torch custom op
``torch.ops.kernelcache.tree_speculative_sampling_target_only`` is registered then too.

``spec``: what it is (arguments, exported functions, KernelSpec, headers); ``checks``: the
bad-input contract (the reference of every message); ``call``: the module, launch, torch op and
the public function.
"""
from .call import choose_num_splits, tree_speculative_sampling_target_only, workspace_numel
from .spec import (
    ALLOC_FN_NAME,
    ARG_NAMES,
    ARGS,
    AUTO_FN_NAME,
    FN_NAME,
    FUNCTIONS,
    KERNEL_NAME,
    OP_NAME,
    OPTIONS_FN_NAME,
    SPLITS_FN_NAME,
    WS_FN_NAME,
    curand_include_dirs,
    flashinfer_include_dir,
    spec,
)

__all__ = [
    "spec",
    "tree_speculative_sampling_target_only",
    "flashinfer_include_dir",
    "curand_include_dirs",
    "choose_num_splits",
    "workspace_numel",
    "FUNCTIONS",
    "ARGS",
    "ARG_NAMES",
    "KERNEL_NAME",
    "OP_NAME",
    "FN_NAME",
    "AUTO_FN_NAME",
    "WS_FN_NAME",
    "SPLITS_FN_NAME",
    "OPTIONS_FN_NAME",
    "ALLOC_FN_NAME",
]
