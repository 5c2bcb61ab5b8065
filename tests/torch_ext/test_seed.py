"""Acceptance 1: the seed failure (a stale pybind11 module after a header change whose mtime is
not newer; two checkouts sharing one extensions dir), shown with plain torch, fixed by the drop-in.
Every load runs in a fresh process, as in the CI job the project was founded on."""
from __future__ import annotations

import os
from pathlib import Path

from .helpers import PARAM_V1, PARAM_V2, SEED_NAME, load_in_fresh_process, write_seed


def _edit_header_keeping_mtime(checkout: Path) -> None:
    """The header gains a field; its mtime is set back before the built .so (git checkout, cache restore)."""
    header = checkout / "param.h"
    old = header.stat().st_mtime - 3600
    header.write_text(PARAM_V2)
    os.utime(header, (old, old))


def test_plain_torch_loads_the_stale_module_after_a_back_dated_header_edit(torch_env, capsys):
    src = write_seed(torch_env.tmp / "pkg", PARAM_V1)
    env = torch_env.env()
    first = load_in_fresh_process(env, "torch", SEED_NAME, [src])
    assert first["version"] == 1 and torch_env.compiles() == 1
    _edit_header_keeping_mtime(src.parent)
    again = load_in_fresh_process(env, "torch", SEED_NAME, [src])
    with capsys.disabled():
        print(f"\n[plain torch after the header edit] version={again['version']} {again.get('error')}")
    assert again["version"] == 1, "torch rebuilt: the stale-module fault was not provoked"
    assert again["error"].startswith("AttributeError") and "min_match_window_size" in again["error"]
    assert torch_env.compiles() == 1


def test_dropin_rebuilds_once_after_a_back_dated_header_edit(torch_env):
    src = write_seed(torch_env.tmp / "pkg", PARAM_V1)
    env = torch_env.env()
    first = load_in_fresh_process(env, "dropin", SEED_NAME, [src])
    assert first["version"] == 1 and "error" in first and torch_env.compiles() == 1
    _edit_header_keeping_mtime(src.parent)
    again = load_in_fresh_process(env, "dropin", SEED_NAME, [src])
    assert again == {**again, "version": 2, "min_match_window_size": 4}
    assert "error" not in again and torch_env.compiles() == 2
    third = load_in_fresh_process(env, "dropin", SEED_NAME, [src])
    assert third["min_match_window_size"] == 4 and third["file"] == again["file"]
    assert torch_env.compiles() == 2


def _two_checkouts(tmp: Path) -> tuple[Path, Path, Path]:
    """checkout-new (older code, built first) and checkout-old (the field, but older mtimes),
    reached through one ``current`` symlink as a deploy switches releases."""
    now = (tmp / "stamp").write_text("") or (tmp / "stamp").stat().st_mtime
    write_seed(tmp / "checkout-new", PARAM_V1, mtime=now)
    write_seed(tmp / "checkout-old", PARAM_V2, mtime=now - 7200)
    current = tmp / "current"
    current.symlink_to(tmp / "checkout-new")
    return current, tmp / "checkout-new", tmp / "checkout-old"


def _switch(current: Path, target: Path) -> None:
    tmp = current.with_name("current.tmp")
    tmp.symlink_to(target)
    os.replace(tmp, current)


def test_plain_torch_two_checkouts_one_extensions_dir_older_second_is_stale(torch_env, capsys):
    current, new, old = _two_checkouts(torch_env.tmp)
    env = torch_env.env()
    assert load_in_fresh_process(env, "torch", SEED_NAME, [current / "ngram.cpp"])["version"] == 1
    _switch(current, old)
    second = load_in_fresh_process(env, "torch", SEED_NAME, [current / "ngram.cpp"])
    with capsys.disabled():
        print(f"\n[plain torch, second checkout] version={second['version']} {second.get('error')}")
    assert second["version"] == 1 and second["error"].startswith("AttributeError")
    assert torch_env.compiles() == 1


def test_dropin_two_checkouts_one_cache_each_gets_its_own_build(torch_env):
    current, new, old = _two_checkouts(torch_env.tmp)
    env = torch_env.env()
    assert load_in_fresh_process(env, "dropin", SEED_NAME, [current / "ngram.cpp"])["version"] == 1
    _switch(current, old)
    second = load_in_fresh_process(env, "dropin", SEED_NAME, [current / "ngram.cpp"])
    assert second["version"] == 2 and second["min_match_window_size"] == 4
    assert torch_env.compiles() == 2
    _switch(current, new)
    assert load_in_fresh_process(env, "dropin", SEED_NAME, [current / "ngram.cpp"])["version"] == 1
    assert torch_env.compiles() == 2
