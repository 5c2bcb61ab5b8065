"""Issue 42, items 3 and 5: an artifact root's files are bounded before they are read or parsed.

A root comes from elsewhere (a companion wheel, a shared directory). Each case plants the real
thing in a real exported root: a deeply nested ``manifest.json`` (raised ``RecursionError`` out
of the load), a FIFO in the binary's place (hung the load), a symlink to ``/dev/zero`` and a
sparse file far larger than the recorded size (read whole: out of memory). Every one is a
refusal of that artifact, then a local build. The loads run in subprocesses whose address space
is capped, so the code before the fix fails them (MemoryError, a hang the timeout ends) without
touching the machine's memory.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest
from kernelcache.entry import manifest

import kernelcache as kc
from kernelcache.export import roots as export
from kernelcache.storage.entry import Entry
from tests.support import project_spec, spec_code

AS_LIMIT = 6 << 30  # the subprocess's address space: compilers fit, a read of /dev/zero does not
LOAD = """
import resource
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
{spec}
import kernelcache.lookup.loader as L
m, r = L.load_with_result(spec)
info = kc.explain(spec)
print("RESULT " + json.dumps({{"value": m.add(2, 3), "status": r.status,
                               "prebuilt": [(p["usable"], p["reason"]) for p in info["prebuilt"]]}}))
"""


@pytest.fixture
def root(kc_env, project, tmp_path):
    """The test kernel exported into an artifact root; the writable cache emptied."""
    kc.load(project_spec(project))
    path = kc_env.entries()[0]
    root = tmp_path / "artifacts"
    export.export_entry(Entry(path, manifest.read(path)), root, None)
    shutil.rmtree(kc_env.cache)
    kc.reset_process_state()
    return root


def _load(kc_env, project, root) -> dict:
    code = LOAD.format(limit=AS_LIMIT, spec=spec_code(project))
    # the timeout only stops a hung load (the FIFO case before the fix); no duration is asserted
    out = kc_env.run_py(code, timeout=120, check=False, KERNELCACHE_PREBUILT=str(root))
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"load failed ({out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}"
    return json.loads(lines[0][len("RESULT "):])


def test_the_exported_root_loads(kc_env, project, root):
    """The baseline the cases below damage: the same subprocess loads the artifact."""
    assert _load(kc_env, project, root)["status"] == "prebuilt"


def test_deeply_nested_manifest_is_refused_then_built(kc_env, project, root):
    man = next(root.rglob("manifest.json"))
    man.write_text('{"name": "adder", "schemas": ' + "[" * 200_000 + "]" * 200_000 + "}")
    (man.parent / "hit.rec").unlink()  # the record is bound to the old manifest: it goes with it
    out = _load(kc_env, project, root)
    assert out["status"] == "built" and out["value"] == 5, out
    assert out["prebuilt"] == []  # no usable candidate: the manifest was refused unparsed
    assert man.stat().st_size > 400_000  # a read-only root is never modified


def _fifo(path):
    os.unlink(path)
    os.mkfifo(path)


def _dev_zero(path):
    os.unlink(path)
    os.symlink("/dev/zero", path)


def _sparse(path):
    os.unlink(path)
    with open(path, "wb") as f:
        f.truncate(64 << 30)  # 64 GiB claimed, no block written


@pytest.mark.parametrize("plant, reason", [(_fifo, "FIFO"), (_dev_zero, "symbolic link"), (_sparse, "size")],
                         ids=["fifo", "symlink_to_dev_zero", "sparse_64GiB"])
def test_binary_that_is_not_the_recorded_file_is_refused_unread(kc_env, project, root, plant, reason):
    so = next(root.rglob("*.so"))
    plant(so)
    out = _load(kc_env, project, root)
    assert out["status"] == "built" and out["value"] == 5, out
    [(usable, why)] = out["prebuilt"]
    assert not usable and reason in why, why


def _link_out(path, outside):
    """Move ``path`` (a directory of the root) outside the root and leave a symlink to it."""
    outside.mkdir(parents=True, exist_ok=True)
    dest = outside / path.name
    shutil.move(str(path), dest)
    os.symlink(dest, path)
    return dest


@pytest.mark.parametrize("level", ["entry", "key"])
def test_entry_linked_outside_the_root_is_refused_unread(kc_env, project, root, tmp_path, level):
    """A valid-looking entry planted outside the root behind a symlink (at the entry or the key
    directory) is not followed: refused with the reason, then built. A link inside the root is fine."""
    entry = next(root.rglob("manifest.json")).parent
    _link_out(entry if level == "entry" else entry.parent, tmp_path / "elsewhere")
    out = _load(kc_env, project, root)
    assert out["status"] == "built" and out["value"] == 5, out
    [(usable, why)] = out["prebuilt"]
    assert not usable and "a link leading outside the root" in why and "elsewhere" in why, why


def test_entry_linked_inside_the_root_is_served(kc_env, project, root):
    entry = next(root.rglob("manifest.json")).parent
    _link_out(entry, root / "store")
    assert _load(kc_env, project, root)["status"] == "prebuilt"
