"""Miss reasons name only what moved (issue 46: a tvm-ffi bump printed two whole ABI dicts that
differed in one hash and read as if only their key order differed)."""
from __future__ import annotations

from kernelcache.key.level1 import diff_inputs, level1

import kernelcache as kc
from kernelcache import kinds


def test_an_abi_change_names_only_the_entries_that_moved(project, kc_env) -> None:
    spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=project, include_dirs=["include"])
    s = kc.Settings.from_env()
    old = level1(kinds.make_plan(spec, s), s).inputs
    new = {**old, "abi": dict(reversed(list({**old["abi"], "tvm_ffi_version": "9.9.9"}.items())))}
    (line,) = diff_inputs(old, new)
    assert line == f"ABI changed: tvm_ffi_version {old['abi']['tvm_ffi_version']} -> 9.9.9", line
    env = {**old, "env": {**old["env"], "CPATH": "/opt/include"}}
    assert diff_inputs(old, env) == [f"environment changed: CPATH {old['env'].get('CPATH', 'unset')} -> /opt/include"]
