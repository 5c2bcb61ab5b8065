"""A FlashInfer JIT module: a tvm-ffi module built from FlashInfer's own command lines.

Why a kind of its own: its flags are FlashInfer's complete lines (its ``-gencode`` set, includes,
``-ltvm_ffi``), so they are used verbatim like the torch kinds' (nothing of kernelcache's tvm-ffi
defaults added), while loading and admission are the tvm-ffi module's. The kind's name is in
both keys, so such an entry never answers for a plain tvm-ffi spec of the same sources.
"""
from __future__ import annotations

from .tvm_ffi import TvmFfi


class FlashInferModule(TvmFfi):
    name = "flashinfer"
    label = "FlashInfer JIT module"
    report_label = "flashinfer"
    verbatim_flags = True

    def key_inputs(self) -> dict[str, str]:
        return {"kind": self.name}


KIND = FlashInferModule()
