"""The lookup loop (kernelcache.lookup.search): the miss reason is computed once and only when needed,
sources are hashed once per load, outcomes are typed, and explain walks the same loop read-only."""
from __future__ import annotations

import json

from kernelcache.base.events import Miss, Status
from kernelcache.lookup import search

import kernelcache as kc
from kernelcache.key import level1
from tests.support import project_spec


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_a_cold_build_computes_its_miss_reason_once(kc_env, project, monkeypatch):
    calls = _counting(monkeypatch, search, "nearest_diff")
    res = kc.load_with_result(project_spec(project))[1]
    assert res.status is Status.BUILT and res.reason == "no cached entry for this kernel"
    assert len(calls) == 1  # not again in the double-check under the build lock
    assert kc.load_with_result(project_spec(project))[1].status is Status.HIT
    assert len(calls) == 1  # a hit never asks why there was no entry
    assert kc.stats()["miss_reasons"] == {Miss.NO_ENTRY: 1}


def test_sources_are_hashed_once_per_load(kc_env, project, monkeypatch):
    calls = _counting(monkeypatch, level1, "source_hashes")
    full = kc.Settings.from_env()  # settings given: the full lookup every time (never recalled)
    kc.load(project_spec(project), full)
    # the lookup's one read, and the build's check that they did not change while it compiled
    assert len(calls) == 2
    kc.reset_process_state()
    kc.load(project_spec(project), full)
    assert len(calls) == 3  # warm: once


def test_outcomes_are_typed_and_serialise_as_words(kc_env, project):
    res = kc.load_with_result(project_spec(project))[1]
    assert res.status is Status.BUILT and f"{res.status}" == "built" and str(res.status) == "built"
    assert json.loads(json.dumps(res.as_dict()))["status"] == "built"


def test_explain_walks_the_same_places_read_only(kc_env, project):
    spec = project_spec(project)
    assert kc.explain(spec)["status"] == "miss"
    kc.load(spec)
    info = kc.explain(spec)
    assert info["status"] == "hit" and info["entry"]
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 7\n")
    info = kc.explain(spec)
    assert info["status"] == "miss" and "kc_add.h changed" in info["reason"]
    assert any("kc_add.h changed" in r for r in info["refused"])
