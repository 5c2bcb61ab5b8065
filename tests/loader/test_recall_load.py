"""``kernelcache.load(spec)`` in a fresh process recalls what the full path answered before
(kernelcache.lookup.front), and only while everything that answer rested on still stands.

Real processes, the counting compiler wrapper, real edits. Whether a call was recalled is read
from the process itself: a recalled call never imports ``kernelcache.lookup.loader``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


PROBE = """
import json, sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({base!r}), include_dirs=["include"],
                     cflags={cflags!r}, functions={{"add": "Callable[[int, int], int]"}})
settings = kc.Settings.from_env() if {with_settings!r} else None
mod = kc.load(spec, settings) if settings is not None else kc.load(spec)
recalled = "kernelcache.lookup.loader" not in sys.modules
again = kc.load(spec)
st = kc.stats()
print(json.dumps(dict(value=mod.add(1, 2), recalled=recalled, same=mod is again, hits=st["hits"],
                      builds=st["builds"])))
"""


def _probe(kc_env, project: Path, cflags: tuple = (), with_settings: bool = False) -> dict:
    before = kc_env.compiles()
    # cwd: the test's own directory (a repository root's egg-info, rewritten by tests that build
    # a wheel, is part of what a recalled call witnesses)
    out = kc_env.run_py(PROBE.format(base=str(project), cflags=list(cflags), with_settings=with_settings),
                        cwd=kc_env.tmp)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["compiles"] = kc_env.compiles() - before
    return got


def test_a_repeated_load_is_recalled_without_the_loader_and_counted_as_a_hit(kc_env, project) -> None:
    first = _probe(kc_env, project)
    assert (first["value"], first["recalled"], first["compiles"], first["builds"]) == (3, False, 1, 1)
    second = _probe(kc_env, project)
    assert (second["value"], second["recalled"], second["compiles"], second["builds"]) == (3, True, 0, 0)
    assert second["same"] and second["hits"] == 2  # the recalled load and the repeat: one module object


def test_a_header_edited_with_its_mtime_restored_is_rebuilt_not_recalled(kc_env, project) -> None:
    _probe(kc_env, project)
    assert _probe(kc_env, project)["recalled"]
    header = project / "include" / "kc_add.h"
    st = header.stat()
    header.write_text("#define KC_OFFSET 5\n")  # same size, mtime set back: only ctime and bytes differ
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    edited = _probe(kc_env, project)
    assert (edited["value"], edited["recalled"], edited["compiles"]) == (8, False, 1)
    again = _probe(kc_env, project)
    assert (again["value"], again["recalled"], again["compiles"]) == (8, True, 0)


def test_other_flags_or_a_settings_object_take_the_full_path(kc_env, project) -> None:
    _probe(kc_env, project)
    assert _probe(kc_env, project)["recalled"]
    other = _probe(kc_env, project, cflags=("-DKC_UNUSED=1",))  # another key: built, not the old answer
    assert (other["value"], other["recalled"], other["compiles"]) == (3, False, 1)
    given = _probe(kc_env, project, with_settings=True)
    assert (given["value"], given["recalled"], given["compiles"]) == (3, False, 0)
    assert _probe(kc_env, project, cflags=("-DKC_UNUSED=1",))["recalled"]
