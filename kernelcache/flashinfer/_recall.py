"""The digest under which a FlashInfer module's load is recalled (``kernelcache.lookup.recall``).

What decides the full path's answer for a ``JitSpecNvcc`` without computing FlashInfer's flags
(6 ms of ``sysconfig`` and ``nvcc --version`` on a process's first module): the spec's own
fields as its parameter table keys them (``_params``; paths also as their symlinks lead now), the bytes of its generated sources (what the
snapshot would copy), FlashInfer's version and the file its flag builders live in, torch's
version and C++ ABI (read by those builders), and every ``FLASHINFER_*`` variable (the extra
flags, the arch list). The rest (nvcc, the host compiler, the module's headers and static sources,
tvm-ffi) is witnessed by stats when the answer is recorded (``kernelcache.lookup.recall_write``).
"""
from __future__ import annotations

import hashlib
import os
from typing import Any

from ..dropin.params import digest as keyed, fields
from ..lookup import recall
from . import _snapshot
from ._params import JIT_SPEC


def _version_facts() -> tuple:
    """FlashInfer's version and flag-builder file, and what of torch its flags read (the C++ ABI)."""
    import flashinfer.jit.cpp_ext as cpp_ext
    import torch  # imported by flashinfer itself

    try:
        from flashinfer.version import __version__ as version
    except ImportError:  # pragma: no cover - every release we gate on has it
        version = "unknown"
    st = os.stat(cpp_ext.__file__)
    return (version, cpp_ext.__file__, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
            str(torch.__version__), bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))


def digest(jit_spec: Any) -> str | None:
    """The recall digest of ``jit_spec`` now; None when it cannot be recalled (a generated
    source that cannot be read whole, fields that are not plain data)."""
    from flashinfer.jit import env as fi_env

    try:
        sources = [str(p) for p in jit_spec.sources]
        gen = [p for p in jit_spec.sources if _snapshot.is_generated(p, fi_env.FLASHINFER_GEN_SRC_DIR)]
        files = _snapshot.files_of(list(gen)) if gen else {}
        call = (*keyed(JIT_SPEC, fields(JIT_SPEC, jit_spec)),
                recall.real_paths(list(jit_spec.extra_include_dirs or ())), recall.real_paths(sources),
                sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items()), _version_facts())
    except (OSError, TypeError, AttributeError):
        return None
    return recall.digest("flashinfer", call, env_prefix="FLASHINFER_")

