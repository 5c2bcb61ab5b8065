"""What the torch drop-in takes from torch or leaves where torch would: torch's own functions
(saved when ``install()`` replaced them; SYCL calls go there) and the copy of an output in the
``build_directory`` a caller named. Shared by the front (recalled calls) and the full path."""
from __future__ import annotations

import os
from typing import Any

# Environment variables torch's writer or its helpers read while producing the flag lines
# (``_flags``; a recalled call's digest covers them too, ``_front``).
TORCH_ENV = ("TORCH_CUDA_ARCH_LIST", "CXX", "CC", "CUDA_HOME", "CUDA_PATH", "CUDA_INC_PATH", "CUDNN_HOME",
             "PYTORCH_NVCC", "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES", "ROCM_HOME", "CUDA_VISIBLE_DEVICES")


def strs(value: Any) -> list[str]:
    """A str / path / sequence argument of torch's functions as a list of str (``None``: empty)."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [str(value)]
    return [str(v) for v in value]


def output_copy(so_path: str, build_directory: Any, filename: str) -> None:
    """Where torch would have written its output, a copy of the entry's binary too: callers inspect
    ``build_directory`` (torch's own tests run ``cuobjdump`` on it). Nothing there is ever read
    back: the entry in the cache stays the one that is loaded.

    A copy, not a hard link: linking changes the entry binary's ctime, which a recalled call
    witnesses (``kernelcache.lookup.recall``). A copy already there with the binary's size and mtime
    (``copy2`` keeps it) is left alone."""
    import shutil

    d = os.path.abspath(os.path.expanduser(os.fspath(build_directory)))
    dest = os.path.join(d, filename)
    src = os.stat(so_path)
    try:
        st = os.stat(dest)
        if (st.st_size, st.st_mtime_ns) == (src.st_size, src.st_mtime_ns):
            return
    except OSError:
        pass
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{filename}.{os.getpid()}.tmp")
    shutil.copy2(so_path, tmp)
    os.replace(tmp, dest)


_ORIGINALS: dict[str, Any] = {}  # torch's own functions, saved by _patch.install


def save_original(fn: str, value: Any) -> None:
    """Remember torch's own ``fn`` (SYCL calls are handed to it while the patch is installed)."""
    _ORIGINALS[fn] = value


def original(fn: str) -> Any:
    """torch's own function ``fn`` (the saved one while patched: never the replacement)."""
    if fn in _ORIGINALS:
        return _ORIGINALS[fn]
    import torch.utils.cpp_extension as tce

    return getattr(tce, fn)
