"""``kernelcache ls`` and ``stats`` name each entry's kind (issue 46: FlashInfer modules, torch
extensions and tvm-ffi modules listed alike): a last column in the tables, ``kind`` (the manifest's
name) and ``kind_label`` fields added to ``--json``; the kind is read from the small head of the
hit record, or from the manifest when the record is missing."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..support import KcEnv, make_project, project_spec
from ..torch_ext.helpers import PARAM_V1, SEED_NAME, write_seed

pytest.importorskip("torch")

LOAD_TORCH = r"""
import sys
import torch
import kernelcache as kc
from kernelcache import cpp_extension
kc.load(cpp_extension.make_spec({name!r}, [{src!r}]))
"""


def _cli(kc_env: KcEnv, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "kernelcache", *args], env=kc_env.env(), capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def _row(out: str, name: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(name + " "))


def test_ls_and_stats_name_the_kind_of_each_entry(kc_env: KcEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelcache as kc

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(kc_env.tmp / "torch_extensions"))
    kc.load(project_spec(make_project(kc_env.tmp / "proj")))
    src = write_seed(kc_env.tmp / "seed", PARAM_V1)
    kc_env.run_py(LOAD_TORCH.format(name=SEED_NAME, src=str(src)), TORCH_EXTENSIONS_DIR=str(kc_env.tmp / "te"))

    listed = {i["name"]: i for i in json.loads(_cli(kc_env, "ls", "--json").stdout)}
    assert {n: (i["kind"], i["kind_label"]) for n, i in listed.items()} == {
        "adder": ("tvm_ffi", "tvm-ffi module"), SEED_NAME: ("torch_python", "torch extension")}
    assert {"entry_id", "path", "source", "key", "size", "last_used"} <= set(listed["adder"])  # fields kept
    table = _cli(kc_env, "ls").stdout
    assert table.splitlines()[1].split() == ["kernel", "entry", "from", "size", "last", "used", "kind"], table
    assert _row(table, "adder")[-2:] == ["tvm-ffi", "module"] and _row(table, SEED_NAME)[-2:] == ["torch", "extension"]

    stats = json.loads(_cli(kc_env, "stats", "--json").stdout)
    assert {n: (r["kind"], r["kind_label"], r["entries"]) for n, r in stats.items()} == {
        "adder": ("tvm_ffi", "tvm-ffi module", 1), SEED_NAME: ("torch_python", "torch extension", 1)}
    assert _row(_cli(kc_env, "stats").stdout, SEED_NAME)[-2:] == ["torch", "extension"]

    from kernelcache.entry import deprecord

    # read from the record's head (the torch manifest holds hundreds of dependencies) ...
    for entry in kc_env.entries(SEED_NAME):
        assert (deprecord.head(entry, "manifest.json") or {}).get("kind") == "torch_python"
    # ... or, for an entry whose hit record is gone (an older version's entry), the manifest
    for entry in kc_env.entries(SEED_NAME):
        (entry / "hit.rec").unlink()
    listed = {i["name"]: i for i in json.loads(_cli(kc_env, "ls", "--json").stdout)}
    assert listed[SEED_NAME]["kind"] == "torch_python"
