"""What ``tree_speculative_sampling_target_only`` is: its argument list, exported functions,
KernelSpec and the headers it needs.

The argument list (:data:`ARGS`) is defined here once; the checks, the launch, the torch op's
schema and the public function's signature are all derived from it. FlashInfer's headers and
curand's are found without importing anything (``import flashinfer`` pulls in its whole CUDA
stack); a missing piece raises a ToolchainError naming the package.
"""
import importlib.util
from pathlib import Path
from typing import List, NamedTuple, Optional

from kernelcache import KernelSpec, ToolchainError
from kernelcache.base.settings import Settings
from kernelcache.host.toolchain import find_cuda_home

from .. import config

KERNEL_NAME = "tree_speculative_sampling"
OP_NAME = "kernelcache::tree_speculative_sampling_target_only"
FN_NAME = "tree_speculative_sampling_target_only"
AUTO_FN_NAME = "tree_speculative_sampling_target_only_auto"
WS_FN_NAME = "tree_speculative_sampling_workspace_numel"
SPLITS_FN_NAME = "tree_speculative_sampling_num_splits"
OPTIONS_FN_NAME = "tree_speculative_sampling_launch_options"
ALLOC_FN_NAME = "tree_speculative_sampling_has_env_allocator"



class Arg(NamedTuple):
    """One tensor argument: its name, torch dtype name, rank (None: checked on its own) and
    whether the kernel writes it."""

    name: str
    dtype: str
    ndim: Optional[int]
    written: bool


#: The tensor arguments, in call order (SGLang's names); the three scalars follow them.
ARGS = (
    Arg("predicts", "int32", None, True),
    Arg("accept_index", "int32", 2, True),
    Arg("accept_token_num", "int32", 1, True),
    Arg("candidates", "int64", 2, False),
    Arg("retrive_index", "int64", 2, False),
    Arg("retrive_next_token", "int64", 2, False),
    Arg("retrive_next_sibling", "int64", 2, False),
    Arg("uniform_samples", "float32", 2, False),
    Arg("uniform_samples_for_final_sampling", "float32", 1, False),
    Arg("target_probs", "float32", 3, False),
    Arg("draft_probs", "float32", 3, True),
)
ARG_NAMES = tuple(a.name for a in ARGS)
#: The scalar arguments after the tensors: (name, type, default).
SCALARS = (("threshold_single", float, 1.0), ("threshold_acc", float, 1.0), ("deterministic", bool, True))

_TENSORS = "Tensor, " * len(ARGS)
#: expected tvm-ffi schemas of the exported functions (checked by the loader)
FUNCTIONS = {
    FN_NAME: f"Callable[[{_TENSORS}float, float, bool, Tensor, int], None]",
    AUTO_FN_NAME: f"Callable[[{_TENSORS}float, float, bool], None]",
    WS_FN_NAME: "Callable[[int, int], int]",
    SPLITS_FN_NAME: "Callable[[int, int, int, bool], int]",
    OPTIONS_FN_NAME: "Callable[[int, int], Array[int]]",
    ALLOC_FN_NAME: "Callable[[Tensor], bool]",
}


CSRC = Path(__file__).resolve().parents[2] / "csrc"


# ---------------------------------------------------------------------------------------------
# Header discovery and the KernelSpec
# ---------------------------------------------------------------------------------------------
def torch_op_schema() -> str:
    """The torch custom op's schema, from :data:`ARGS` (written tensors carry an alias mark)."""
    params = [f"Tensor(a{i}!) {a.name}" if a.written else f"Tensor {a.name}" for i, a in enumerate(ARGS)]
    params += [f"{t.__name__} {n}" for n, t, _ in SCALARS]
    return f"({', '.join(params)}) -> ()"


def flashinfer_include_dir(settings: Optional[Settings] = None) -> str:
    """FlashInfer's include dir: ``settings.flashinfer_include`` ($KERNELCACHE_FLASHINFER_INCLUDE),
    else the installed flashinfer-python wheel's ``flashinfer/data/include`` (found without
    importing flashinfer). ``settings`` defaults to the kernels' (``kernels.configure``)."""
    env = config.resolved(settings).flashinfer_include
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


def _cuda_home() -> "str | None":
    """The toolkit that compiles the kernel (kernelcache.host.toolchain), or None when there is none."""
    try:
        return find_cuda_home()
    except ToolchainError:
        return None


def curand_include_dirs() -> List[str]:
    """Extra include dirs for curand headers: none when the CUDA toolkit that compiles (as found
    by ``kernelcache.host.toolchain.find_cuda_home``) has them, else the ``nvidia-curand`` wheel's
    include dir."""
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


def spec(settings: Optional[Settings] = None) -> KernelSpec:
    """The KernelSpec (its headers found for ``settings``, default: the kernels' settings)."""
    return KernelSpec(
        name=KERNEL_NAME,
        sources=["speculative_sampling/tree_sampling.cu"],
        root=CSRC,
        system_include_dirs=[flashinfer_include_dir(settings), *curand_include_dirs()],
        cuda_cflags=["-DNDEBUG"],
        functions=dict(FUNCTIONS),
        backend="cuda",
    )
