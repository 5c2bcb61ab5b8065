"""Issue 40: each drop-in front derives its recall digest, its call through and its signature
check from one parameter table per foreign function. Compared here with the real installed
functions (inspect.signature of torch's, tvm-ffi's, FlashInfer's, SGLang's): a foreign
parameter that is neither in the digest nor declared as not changing the answer fails.
"""
from __future__ import annotations

import inspect

import pytest

from kernelcache.dropin.params import Param, ParamTable, ignored


def _tables() -> list[ParamTable]:
    from kernelcache.cpp_extension import _params as torch_params
    from kernelcache.flashinfer import _params as fi_params
    from kernelcache.sglang import _params as sg_params
    from kernelcache.tvm_ffi import _params as tvm_params

    return [*tvm_params.TABLES, *torch_params.TABLES, *fi_params.TABLES, *sg_params.TABLES]


NEEDS = {"torch.": "torch", "flashinfer.": "flashinfer", "sglang.": "sglang", "tvm_ffi.": "tvm_ffi"}


@pytest.mark.parametrize("table", _tables(), ids=lambda t: t.foreign)
def test_table_is_the_installed_signature(table: ParamTable) -> None:
    pytest.importorskip(next(v for k, v in NEEDS.items() if table.foreign.startswith(k)))
    assert table.gaps() == []
    for p in table.params:  # every parameter left out of the digest says why
        assert p.keyed or p.why.strip(), p


def test_a_new_foreign_parameter_is_a_gap() -> None:
    """What a release adding a parameter looks like to the check: named, whatever it is."""
    table = ParamTable("x:f", (Param("name"), ignored("verbose", "output only")))

    def f(name, verbose=False, new_knob=None): ...  # noqa: ANN001, ANN202

    gaps = table.gaps(f)
    assert len(gaps) == 1 and "'new_knob' is neither in the digest nor declared" in gaps[0]

    def g(name): ...  # noqa: ANN001, ANN202 - a parameter the foreign function dropped

    assert "'verbose'" in table.gaps(g)[0]
    with pytest.raises(ValueError, match="without saying why"):
        Param("quiet", keyed=False)


def test_fronts_take_exactly_the_tables_parameters() -> None:
    """The drop-ins' own signatures are the tables' (plus ``settings``), so the call through
    passes every foreign parameter and nothing else."""
    from kernelcache import tvm_ffi as kc_tvm
    from kernelcache.cpp_extension import _front as torch_front, _params as torch_params
    from kernelcache.tvm_ffi import _api as tvm_api, _params as tvm_params

    pairs = [(kc_tvm.load_inline, tvm_params.LOAD_INLINE), (kc_tvm.load, tvm_params.LOAD),
             (tvm_api.build_inline, tvm_params.BUILD_INLINE), (tvm_api.build, tvm_params.BUILD),
             (torch_front.load, torch_params.LOAD), (torch_front.load_inline, torch_params.LOAD_INLINE)]
    for fn, table in pairs:
        own = [n for n in inspect.signature(fn).parameters if n not in ("settings", "_recall")]
        assert own == list(table.names), (fn, own)


def test_digest_and_call_through_come_from_the_table() -> None:
    from kernelcache.tvm_ffi import _params as tvm_params

    table = tvm_params.LOAD_INLINE
    args = {n: f"<{n}>" for n in table.names}
    assert table.digest(args) == tuple(f"<{p.name}>" for p in table.params if p.keyed)
    assert "<build_directory>" not in table.digest(args) and "<keep_module_alive>" not in table.digest(args)
    assert table.bind({**args, "settings": None, "d": 1}) == args
