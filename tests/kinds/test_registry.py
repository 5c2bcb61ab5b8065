"""The kind registry in one process: a registered kind is found by name, forgotten by
``reset_process_state``; the package's own names cannot be taken; unknown names say where kinds
come from."""
from __future__ import annotations

import pytest
from kernelcache.base.errors import SpecError

import kernelcache as kc
from kernelcache import kinds
from kernelcache.kinds.base import Kind


class _Probe(Kind):
    name = "probe_kind"


def test_registered_kind_is_found_then_forgotten() -> None:
    probe = kinds.register(_Probe())
    assert kinds.of("probe_kind") is probe
    kc.reset_process_state()
    with pytest.raises(SpecError, match="no entry point 'probe_kind' in group 'kernelcache.kinds'"):
        kinds.of("probe_kind")


def test_own_names_and_non_kinds_are_refused() -> None:
    class Shadow(Kind):
        name = "tvm_ffi"

    with pytest.raises(SpecError, match="one of kernelcache's own"):
        kinds.register(Shadow())
    with pytest.raises(SpecError, match="is not a kernelcache.kinds.base.Kind"):
        kinds.register(object())  # type: ignore[arg-type]
    for name in ("base", "registry", "torch_common", "no such"):
        with pytest.raises(SpecError, match="unknown module kind"):
            kinds.of(name)
    assert kinds.of("tvm_ffi").name == "tvm_ffi"
