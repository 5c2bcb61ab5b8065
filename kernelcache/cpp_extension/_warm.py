"""The modules a warm ``load_inline``/``load`` runs, imported with the drop-in.

Why: the call alone must cost no more than torch's warm call (issue 24), and importing the
loader and the lookup loop inside the first call cost more than that call. torch pays its own
imports in ``import torch.utils.cpp_extension``; the drop-in pays these in its import, still
far below torch's. Through the public API (``kernelcache.load_with_result`` resolves the loader
lazily; the drop-in never imports the loader's internals). None of them imports torch, tvm_ffi
or filelock (a build imports what it needs when it happens).
"""
from __future__ import annotations

import kernelcache

from .. import events, inline_sources  # noqa: F401 - what the call uses besides the loader

kernelcache.load_with_result  # noqa: B018 - the public loader's modules, imported now
