"""The KernelSpec of ``tree_speculative_sampling_target_only`` and the headers it needs.

FlashInfer's headers and curand's are found without importing anything (``import flashinfer``
pulls in its whole CUDA stack); a missing piece raises a ToolchainError naming the package.
Kept apart from the call path so the op module can build the kernel without importing it.
"""
import importlib.util
from pathlib import Path
from typing import List

from kernelcache import KernelSpec, ToolchainError
from kernelcache.settings import Settings
from kernelcache.toolchain import find_cuda_home

KERNEL_NAME = "tree_speculative_sampling"
OP_NAME = "kernelcache::tree_speculative_sampling_target_only"
FN_NAME = "tree_speculative_sampling_target_only"
AUTO_FN_NAME = "tree_speculative_sampling_target_only_auto"
WS_FN_NAME = "tree_speculative_sampling_workspace_numel"
SPLITS_FN_NAME = "tree_speculative_sampling_num_splits"
OPTIONS_FN_NAME = "tree_speculative_sampling_launch_options"
ALLOC_FN_NAME = "tree_speculative_sampling_has_env_allocator"

_T11 = "Tensor, " * 11
#: expected tvm-ffi schemas of the exported functions (checked by the loader)
FUNCTIONS = {
    FN_NAME: f"Callable[[{_T11}float, float, bool, Tensor, int], None]",
    AUTO_FN_NAME: f"Callable[[{_T11}float, float, bool], None]",
    WS_FN_NAME: "Callable[[int, int], int]",
    SPLITS_FN_NAME: "Callable[[int, int, int, bool], int]",
    OPTIONS_FN_NAME: "Callable[[int, int], Array[int]]",
    ALLOC_FN_NAME: "Callable[[Tensor], bool]",
}


_CSRC = Path(__file__).resolve().parent.parent / "csrc"


# ---------------------------------------------------------------------------------------------
# Header discovery and the KernelSpec
# ---------------------------------------------------------------------------------------------
def flashinfer_include_dir() -> str:
    """FlashInfer's include dir: $KERNELCACHE_FLASHINFER_INCLUDE, else the installed
    flashinfer-python wheel's ``flashinfer/data/include`` (found without importing flashinfer)."""
    env = Settings.from_env().flashinfer_include
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
    """The toolkit that compiles the kernel (kernelcache.toolchain), or None when there is none."""
    try:
        return find_cuda_home()
    except ToolchainError:
        return None


def curand_include_dirs() -> List[str]:
    """Extra include dirs for curand headers: none when the CUDA toolkit that compiles (as found
    by ``kernelcache.toolchain.find_cuda_home``) has them, else the ``nvidia-curand`` wheel's
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
