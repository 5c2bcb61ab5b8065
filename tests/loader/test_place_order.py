"""The order of places is written once (``search.ORDER``): a load, its no-toolchain path and
``explain`` try the places an entry can come from in that order.

Provoked through behaviour: the same kernel stands in every place (a prebuilt root, the local
cache, fetched from the fleet), each copy's manifest forged to need a CPU feature this CPU lacks,
so every place really refuses it (the refusal path is real, the entries are kept) and each path
lists its refusals in the order it tried the places."""
from __future__ import annotations

from pathlib import Path

import pytest
from kernelcache.base.events import Place
from kernelcache.base.settings import Settings
from kernelcache.entry import manifest
from kernelcache.lookup import search

import kernelcache as kc
from kernelcache import kinds
from kernelcache.export import roots as export
from kernelcache.storage.entry import Entry
from tests.support import copy_as_fetched, project_spec

FAKE = "kc_place_order_feature"  # a CPU feature no CPU has


@pytest.fixture
def everywhere(kc_env, project, tmp_path):
    """(spec, settings, place -> entry dir): one refused copy of the kernel in every place."""
    spec = project_spec(project, cflags=["-march=native"])
    kc.load(spec)
    [entry] = kc_env.entries()
    pre = export.export_entry(Entry(entry, manifest.read(entry)), tmp_path / "artifacts", None)
    s = Settings.from_env().replace(prebuilt=(tmp_path / "artifacts",), no_build=True)
    dirs = {Place.PREBUILT: Path(pre), Place.LOCAL: entry, Place.FETCHED: copy_as_fetched(entry, spec, s)}
    for d in dirs.values():
        m = manifest.read(d)
        m.inputs["native"]["cpu_features"] = [*m.inputs["native"]["cpu_features"], FAKE]
        manifest.write(d, m)
    kc.reset_process_state()
    return spec, s, dirs


def _places(lines: list[str], dirs: dict[Place, Path]) -> list[Place]:
    """The place of each refusal line, in the order listed (each names its entry's directory)."""
    out = []
    for line in lines:
        [place] = [p for p, d in dirs.items() if str(d) in line]
        assert FAKE in line, line
        out.append(place)
    return out


def test_the_order_names_every_place_once():
    assert sorted(search.ORDER) == sorted(Place) and len(set(search.ORDER)) == len(search.ORDER)
    assert search.BEFORE_PLAN + search.AFTER_PLAN == search.ORDER
    assert search.NO_TOOLCHAIN == tuple(p for p in search.AFTER_PLAN if p is not search.KEYED)


def test_load_and_explain_try_the_places_in_the_declared_order(everywhere):
    spec, s, dirs = everywhere
    info = kc.explain(spec, settings=s)  # read only: first, before the load quarantines the fetched copy
    assert info["status"] == "miss"
    assert _places(info["refused"], dirs) == list(search.ORDER), info["refused"]
    with pytest.raises(kc.CacheMissError) as exc:
        kc.load(spec, settings=s)
    assert _places(exc.value.candidates, dirs) == list(search.ORDER), exc.value.candidates
    assert dirs[Place.LOCAL].exists()  # control: the forged local entry is skipped, not quarantined


def test_without_a_toolchain_the_same_order_less_the_keyed_place(everywhere, monkeypatch, tmp_path):
    spec, s, dirs = everywhere
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))  # a serving host: no compiler
    kc.reset_process_state()
    with pytest.raises(kc.ToolchainError):
        kinds.make_plan(spec, s)  # control: no plan, so no level-1 key
    expected = [p for p in search.ORDER if p is not search.KEYED]
    info = kc.explain(spec, settings=s)
    assert "no toolchain" in info["note"] and info["status"] == "miss"
    assert _places(info["refused"], dirs) == expected, info["refused"]
    with pytest.raises(kc.CacheMissError) as exc:
        kc.load(spec, settings=s)
    assert "no toolchain" in exc.value.reason
    assert _places(exc.value.candidates, dirs) == expected, exc.value.candidates
