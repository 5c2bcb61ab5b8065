"""Issue 40: each drop-in front derives its recall digest, its call through and its signature
check from one parameter table per foreign function (``kernelcache.dropin.params``). Compared
here with the real installed functions (inspect.signature of torch's, tvm-ffi's, FlashInfer's,
SGLang's): a foreign parameter that is neither in the digest nor declared as not changing the
answer fails.
"""
from __future__ import annotations

import inspect

import pytest

from kernelcache.dropin import params


def _tables() -> list[params.Table]:
    from kernelcache.cpp_extension import _params as torch_params
    from kernelcache.flashinfer import _params as fi_params
    from kernelcache.sglang import _params as sg_params
    from kernelcache.tvm_ffi import _params as tvm_params

    return [*tvm_params.TABLES, *torch_params.TABLES, *fi_params.TABLES, *sg_params.TABLES]


NEEDS = {"torch.": "torch", "flashinfer.": "flashinfer", "sglang.": "sglang", "tvm_ffi.": "tvm_ffi"}


@pytest.mark.parametrize("t", _tables(), ids=lambda t: t[0])
def test_table_is_the_installed_signature(t: params.Table) -> None:
    pytest.importorskip(next(v for k, v in NEEDS.items() if t[0].startswith(k)))
    assert params.table(*t) == t  # well formed: unique names, every left-out parameter says why
    assert params.gaps(t) == []


def test_a_new_foreign_parameter_is_a_gap() -> None:
    """What a release adding a parameter looks like to the check: named, whatever it is."""
    t = params.table("x:f", ("name", "verbose"), {"verbose": "output only"})

    def f(name, verbose=False, new_knob=None): ...  # noqa: ANN001, ANN202

    gaps = params.gaps(t, f)
    assert len(gaps) == 1 and "'new_knob' is neither in the digest nor declared" in gaps[0]

    def g(name): ...  # noqa: ANN001, ANN202 - a parameter the foreign function dropped

    assert "'verbose'" in params.gaps(t, g)[0]
    with pytest.raises(ValueError, match="without saying why"):
        params.table("x:f", ("name", "quiet"), {"quiet": " "})


def test_fronts_take_exactly_the_tables_parameters() -> None:
    """The drop-ins' own signatures are the tables' (plus ``settings``), so the call through
    passes every foreign parameter and nothing else."""
    from kernelcache import tvm_ffi as kc_tvm
    from kernelcache.cpp_extension import _front as torch_front, _params as torch_params
    from kernelcache.tvm_ffi import _api as tvm_api, _params as tvm_params

    pairs = [(kc_tvm.load_inline, tvm_params.LOAD_INLINE), (kc_tvm.load, tvm_params.LOAD),
             (tvm_api.build_inline, tvm_params.BUILD_INLINE), (tvm_api.build, tvm_params.BUILD),
             (torch_front.load, torch_params.LOAD), (torch_front.load_inline, torch_params.LOAD_INLINE)]
    for fn, t in pairs:
        own = [n for n in inspect.signature(fn).parameters if n not in ("settings", "_recall")]
        assert own == list(t[1]), (fn, own)


def test_digest_and_call_through_come_from_the_table() -> None:
    from kernelcache.cpp_extension import _params as torch_params

    t = torch_params.LOAD
    args = {n: [f"<{n}>"] for n in t[1]}
    got = params.digest(t, args)
    assert len(got) == len(params.keyed(t)) and ["<extra_cflags>"] in got and True in got  # lists, switches
    assert ["<build_directory>"] not in got and ["<verbose>"] not in got
    assert params.bind(t, {**args, "settings": None, "d": 1}) == args
