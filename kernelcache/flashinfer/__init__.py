"""Drop-in for FlashInfer's JIT: its nvcc modules built, cached and shared by kernelcache.

No code change: ``KERNELCACHE_PATCH=flashinfer`` (or ``all``), ``pytest -p kernelcache
--kc-patch=flashinfer``, ``python -m kernelcache.patch --jit flashinfer script.py`` (or
``python -m kernelcache.flashinfer script.py``), or ``kernelcache.flashinfer.install()``.

What changes for a FlashInfer module (``JitSpecNvcc``): FlashInfer's AOT packages still go
first; then the module is a kernelcache entry keyed by the bytes of every file the compiler
read, the expanded command lines, the compilers' identity, the gencode set and the tvm-ffi ABI
(not by the workspace path, the URI or mtimes); builds are single-flight across processes and
published atomically; generated sources are compiled from an immutable snapshot; a fresh host
fetches the entry from the fleet instead of compiling; ``FLASHINFER_DISABLE_JIT`` means no build,
not no cache. Untested FlashInfer versions and modules with steps the route does not mirror
run FlashInfer's own JIT, with one line saying why (docs/flashinfer_dropin.md).

Importing this module patches nothing and imports neither FlashInfer nor tvm-ffi.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._gate import TESTED_VERSIONS
from ._patch import install, is_installed, uninstall

if TYPE_CHECKING:
    from ..base.settings import Settings
    from ..base.spec import KernelSpec

__all__ = ["install", "uninstall", "is_installed", "TESTED_VERSIONS", "kernel_spec", "built"]


def kernel_spec(jit_spec: Any, settings: "Settings | None" = None) -> "KernelSpec":
    """The kernelcache ``KernelSpec`` the route builds for a FlashInfer ``JitSpecNvcc``."""
    from ..base.settings import resolve
    from ._spec import kernel_spec as _kernel_spec

    return _kernel_spec(jit_spec, resolve(settings))[0]


def built(texts: list[str], settings: "Settings | None" = None) -> list[dict]:
    """The modules ``texts`` name (``MODULE:FUNCTION[(LITERAL ARGS)]``), each a hit or one build
    through the route: a row per module (``name``, ``status``, ``entry_path`` or ``reason``)."""
    from ..base.settings import resolve
    from ._export import built as _built

    return _built(list(texts), resolve(settings))

