"""A recalled answer rests on kernelcache's own rules too (issue 40's stale-recall reproduction): in
an editable install, a change of the key rule in ``kinds/tvm_ffi.py`` left ``kc.load`` serving the old
entry while ``KERNELCACHE_NO_RECALL=1`` built the new one. The memo's witnesses are now every
kernelcache module the deciding process imported (an installed kernelcache: its RECORD), not a
hand-kept list of rule files.

Real processes on a copy of the package (a checkout on the import path, as an editable install
puts it), a real edit of the kind's key rule, the counting compiler wrapper.
"""
from __future__ import annotations

import json
import os
import shutil

from tests.support import REPO

PROBE = """
import json, sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({base!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int], int]"}})
mod = kc.load(spec)
print(json.dumps(dict(value=mod.add(1, 2), recalled="kernelcache.lookup.loader" not in sys.modules,
                      where=kc.__file__)))
"""


def test_an_edited_kind_key_rule_is_not_answered_by_an_older_recall(kc_env, project, tmp_path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "kernelcache", checkout / "kernelcache",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    path = f"{checkout}{os.pathsep}{REPO}"

    def probe() -> dict:
        before = kc_env.compiles()
        out = kc_env.run_py(PROBE.format(base=str(project)), cwd=kc_env.tmp, PYTHONPATH=path)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        got["compiles"] = kc_env.compiles() - before
        assert got.pop("where").startswith(str(checkout)), "the probe did not import the copied package"
        return got

    assert probe() == {"value": 3, "recalled": False, "compiles": 1}
    assert probe() == {"value": 3, "recalled": True, "compiles": 0}
    rule = checkout / "kernelcache" / "kinds" / "tvm_ffi.py"
    text = rule.read_text()
    old = "    def key_inputs(self) -> dict[str, str]:\n        return {}\n"
    assert old in text
    rule.write_text(text.replace(old, "    def key_inputs(self) -> dict[str, str]:\n        return {'rule': '2'}\n"))
    # the new rule keys the call differently: the full path decides (a build under the new key)
    assert probe() == {"value": 3, "recalled": False, "compiles": 1}
    assert probe() == {"value": 3, "recalled": True, "compiles": 0}
