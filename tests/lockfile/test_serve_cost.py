"""Issue 39 follow-up: locked serving reads no input the unlocked load does not.

Why by counting reads: the lock's own checks used to re-hash every locked input and recompute the
source key before the loader did the same (18-20 ms for three kernels, benchmarks/RESULTS.md).
Now the loader serves the kernel without building and the served entry is compared with the
lock, so in a fresh process each source and header is opened as often with ``KERNELCACHE_LOCK``
as without it (counted by an audit hook on ``open``: the process's real file opens). A header
edited with its mtime put back is still refused (tests/lockfile/test_serve.py).
"""
from __future__ import annotations

import json
from pathlib import Path

from .lockhelp import app_code, last_json, run_app

HOOK = """
import os, sys, json
_opened = []
def _hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.path.basename(os.fsdecode(args[0])))
sys.addaudithook(_hook)
"""
TAIL = """
print(json.dumps({n: _opened.count(n) for n in ("add.cc", "kc_add.h")}))
"""


def _opens(kc_env, project: Path, **extra: str) -> dict[str, int]:
    p = kc_env.run_py(HOOK + app_code(project) + TAIL, **extra)
    return last_json(p.stdout)


def test_a_locked_load_opens_each_input_as_often_as_an_unlocked_one(kc_env, project) -> None:
    lock = kc_env.tmp / "kernels.lock"
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    assert "adder" in json.loads(lock.read_text())["kernels"]
    unlocked = _opens(kc_env, project)
    locked = _opens(kc_env, project, KERNELCACHE_LOCK=str(lock))
    assert unlocked["add.cc"] >= 1  # the loader reads the source for its key
    assert locked == unlocked, (locked, unlocked)
