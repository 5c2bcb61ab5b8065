"""Closed outcome words (events.Status, Place, Miss, Event, RejectCode, Upload, Explained): enums
in code, their words only where JSON or xdist carries them."""
from __future__ import annotations

import json

import pytest
from kernelcache.base import events
from kernelcache.base.events import Event, Explained, Place, RejectCode, Status, Upload
from kernelcache.entry.validate import Rejection


def test_a_member_and_its_word_are_one_key():
    """A row that crossed xdist or JSON holds the word; tables keyed by members must answer it."""
    severity = {Status.FAILED: 2, Status.HIT: 1}
    assert severity["failed"] == 2 and severity.get("hit") == 1
    assert {"hit": 1}[Status.HIT] == 1 and Status.HIT in {"hit"}
    assert json.loads(json.dumps({"status": Upload.REPAIRED, "code": RejectCode.CPU})) == \
        {"status": "repaired", "code": "cpu"}
    assert f"{Explained.MISS}" == "miss" and str(Place.FETCHED) == "fetched"


def test_rejection_code_is_closed():
    assert Rejection(RejectCode.DEPS, "header changed").code is RejectCode.DEPS
    # a kind outside the package (entry point) may give the word: it becomes the member
    assert Rejection("identity", "another build").code is RejectCode.IDENTITY  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="identiy"):
        Rejection("identiy", "a typo is no code")  # type: ignore[arg-type]


def test_every_place_has_its_refused_event():
    assert set(events.REFUSED) == set(Place)
    assert all(isinstance(e, Event) and e.value == f"{p.value}_refused" for p, e in events.REFUSED.items())
