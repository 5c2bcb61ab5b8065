"""KernelSpec.functions: a mapping {name: schema or None}, or the list of names tvm-ffi accepts."""
from __future__ import annotations

from pathlib import Path

import pytest

import kernelcache as kc


def _spec(tmp_path: Path, functions):
    (tmp_path / "a.cc").write_text("int x;\n")
    return kc.KernelSpec(name="k", sources=["a.cc"], root=tmp_path, functions=functions)


def test_list_of_names_means_learned_schemas(tmp_path):
    spec = _spec(tmp_path, ["my_fn", "other"])
    assert spec.functions == {"my_fn": None, "other": None}


def test_single_name_string(tmp_path):
    assert _spec(tmp_path, "my_fn").functions == {"my_fn": None}


def test_mapping_is_unchanged(tmp_path):
    spec = _spec(tmp_path, {"b": "Callable[[int], int]", "a": None})
    assert spec.functions == {"a": None, "b": "Callable[[int], int]"}


@pytest.mark.parametrize("bad", [[("my_fn", "x", "y")], 5, ["ok", 3], ["bad name"], [None]])
def test_other_shapes_raise_spec_error_saying_what_is_expected(tmp_path, bad):
    with pytest.raises(kc.SpecError, match="functions"):
        _spec(tmp_path, bad)


def test_spec_references_accept_a_spec_a_callable_a_mapping_or_an_iterable(tmp_path):
    from kernelcache.base.spec import specs_of_value

    a = kc.KernelSpec(name="a", sources=["a.cc"], root=tmp_path)
    b = kc.KernelSpec(name="b", sources=["b.cc"], root=tmp_path)
    assert specs_of_value(a, "ref") == [a]
    assert specs_of_value(lambda: [a, b], "ref") == [a, b]
    assert specs_of_value({"a": a, "b": b}, "ref") == [a, b]
    with pytest.raises(kc.SpecError, match=r"ref 'm:f' returned int, expected KernelSpec\(s\)"):
        specs_of_value(lambda: [a, 3], "ref 'm:f'")
