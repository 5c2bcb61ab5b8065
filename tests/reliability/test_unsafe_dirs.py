"""A cache dir or prebuilt root other users can write is named in a warning, once per process.

Real directories with real modes and owners (the tests run as root, which may chown); loads go
through the public API. ``-W error`` (the suite's setting) would turn the warning into an error,
so each load here records warnings instead.
"""
from __future__ import annotations

import warnings

import pytest
from kernelcache.base.errors import CacheMissError, UnsafeDirectoryError, UnsafeDirectoryWarning

import kernelcache as kc
from tests.support import project_spec


def _load_warnings(spec, settings) -> list[str]:
    """Messages of the UnsafeDirectoryWarnings one load raised (a miss is fine: no_build)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        try:
            kc.load(spec, settings=settings)
        except CacheMissError:
            pass
    return [str(w.message) for w in got if issubclass(w.category, UnsafeDirectoryWarning)]


def test_a_world_writable_cache_dir_is_named_once(kc_env, project):
    spec = project_spec(project)
    s = kc.Settings.from_env()
    assert _load_warnings(spec, s) == []  # the fixture's cache: root's, 0755
    kc.reset_process_state()
    kc_env.cache.chmod(0o777)
    got = _load_warnings(spec, s)
    assert len(got) == 1 and f"cache dir {kc_env.cache} can be written by other users" in got[0]
    assert "writable by every user (mode 0777)" in got[0] and "KERNELCACHE_DIR" in got[0]
    assert _load_warnings(spec, s) == []  # once per process


@pytest.mark.parametrize("how", ["parent 0777", "parent 1777", "owner"])
def test_a_cache_dir_others_can_replace_or_own(kc_env, project, tmp_path, how):
    shared = tmp_path / "shared"
    cache = shared / "cache"
    cache.mkdir(parents=True)
    if how == "owner":
        import os

        os.chown(cache, 4242, 4242)
    else:
        shared.chmod(0o1777 if how == "parent 1777" else 0o777)
    s = kc.Settings.from_env().replace(cache_dir=cache, no_build=True)
    got = _load_warnings(project_spec(project), s)
    if how == "parent 1777":  # the sticky bit: others cannot rename what is not theirs
        assert got == []
    elif how == "owner":
        assert len(got) == 1 and f"{cache} belongs to another user (uid 4242)" in got[0]
    else:
        assert len(got) == 1 and f"{shared}, a directory above it, is writable by every user" in got[0]
    assert kc_env.compiles() == 0


def test_a_world_writable_prebuilt_root_is_named(kc_env, project, tmp_path):
    root = tmp_path / "artifacts"
    (root / "v1" / "entries").mkdir(parents=True)
    root.chmod(0o777)
    s = kc.Settings.from_env().replace(prebuilt=(root,), no_build=True)
    got = _load_warnings(project_spec(project), s)
    assert len(got) == 1 and f"prebuilt root {root} can be written by other users" in got[0], got
    assert "KERNELCACHE_PREBUILT" in got[0]


# -- KERNELCACHE_STRICT_DIRS: the warning becomes a refusal ------------------------------------
def test_strict_refuses_a_world_writable_cache_dir(kc_env, project, monkeypatch):
    kc_env.cache.mkdir(parents=True, exist_ok=True)
    kc_env.cache.chmod(0o777)
    monkeypatch.setenv("KERNELCACHE_STRICT_DIRS", "1")
    with pytest.raises(UnsafeDirectoryError) as err:
        kc.load(project_spec(project))
    msg = str(err.value)
    assert f"cache dir {kc_env.cache} can be written by other users" in msg and "mode 0777" in msg, msg
    assert "KERNELCACHE_STRICT_DIRS" in msg and "KERNELCACHE_DIR" in msg, msg
    assert kc_env.compiles() == 0 and not (kc_env.cache / "v1" / "entries").exists()


def test_strict_skips_a_world_writable_prebuilt_root_with_the_reason(kc_env, project, tmp_path):
    import shutil

    from kernelcache.entry import manifest

    from kernelcache.export import roots as export
    from kernelcache.storage.entry import Entry

    spec = project_spec(project)
    kc.load(spec)
    [path] = kc_env.entries()
    root = tmp_path / "artifacts"
    export.export_entry(Entry(path, manifest.read(path)), root, None)
    shutil.rmtree(kc_env.cache)
    kc.reset_process_state()
    kc_env.reset_counts()
    root.chmod(0o777)
    base = kc.Settings.from_env().replace(prebuilt=(root,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeDirectoryWarning)
        _, res = kc.load_with_result(spec, settings=base)
    assert res.status == "prebuilt"  # not strict: warned, used
    kc.reset_process_state()
    strict = base.replace(strict_dirs=True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        mod, res = kc.load_with_result(spec, settings=strict)
        [pre] = kc.explain(spec, settings=strict)["prebuilt"]
    assert not [w for w in got if issubclass(w.category, UnsafeDirectoryWarning)]  # a refusal, not a warning
    assert res.status == "built" and mod.add(2, 3) == 5 and kc_env.compiles() == 1
    assert not pre["usable"] and f"prebuilt root {root} can be written by other users" in pre["reason"], pre
    assert "KERNELCACHE_STRICT_DIRS" in pre["reason"] and "Skipped" in pre["reason"], pre


def test_strict_is_not_bypassed_by_a_recalled_call(kc_env, project):
    """A repeated call in a fresh process is answered without the loader (kernelcache.lookup.recall); a
    cache dir made world-writable since must still be refused, not recalled."""
    from tests.support import spec_code

    code = spec_code(project) + "\ntry:\n    print('OK', kc.load(spec).add(1, 2))\n" \
        "except kc.KernelCacheError as e:\n    print('REFUSED', type(e).__name__, e)\n" \
        "print('LOADER', 'kernelcache.lookup.loader' in sys.modules)\n"

    def run() -> list[str]:
        return kc_env.run_py(code, cwd=kc_env.tmp, KERNELCACHE_STRICT_DIRS="1").stdout.split()

    assert run()[:2] == ["OK", "3"]
    # a sibling created beside the cache dir (other tests, other users of /tmp) moves its parent's
    # stat: not part of a recalled answer (CI's flake: the parents' stats were witnessed)
    (kc_env.cache.parent / "a-sibling").mkdir()
    assert run()[-2:] == ["LOADER", "False"]  # recalled
    kc_env.cache.chmod(0o777)
    got = run()
    assert got[:2] == ["REFUSED", "UnsafeDirectoryError"], got
    assert kc_env.compiles() == 1
