"""layout.py: the one spelling of the cache layout, and the modules that must ask it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kernelcache.base.layout import AREAS, BUILT, FETCHED, KEY_PREFIX, Layout

import kernelcache as kc

PKG = Path(kc.__file__).resolve().parent


def test_paths_of_a_cache_dir(tmp_path):
    lay = Layout(tmp_path)
    key = "ab" * 32
    assert lay.root == tmp_path / "v1"
    assert lay.key_dir("k", key) == tmp_path / "v1" / "entries" / "k" / key[:KEY_PREFIX]
    assert lay.entry_dir("k", key, "e1") == lay.key_dir("k", key) / "e1"
    assert lay.fetched_dir("k", key) == tmp_path / "v1" / "fetched" / "k" / key[:KEY_PREFIX]
    assert lay.kernel_dir("k", FETCHED) == tmp_path / "v1" / "fetched" / "k"
    assert {lay.tmp.name, lay.quarantine.name, lay.trash.name, lay.memo.name} == {"tmp", "quarantine", "trash",
                                                                                   "toolchain"}
    assert lay.dropin_objects == tmp_path / "v1" / "dropin" / "objects" and lay.inline_dir("f").parent == lay.inline
    assert set(AREAS) == {BUILT, FETCHED}
    with pytest.raises(ValueError, match="unknown cache area 'other'"):
        lay.area("other")


def test_layout_touches_nothing_and_knows_artifact_roots(tmp_path):
    lay = Layout(str(tmp_path / "root"))
    assert lay.key_dir("k", "0" * 64) and not (tmp_path / "root").exists()
    assert not lay.is_artifact_root()
    (tmp_path / "root" / "v1" / "entries").mkdir(parents=True)
    assert lay.is_artifact_root() and repr(lay) == f"Layout({str(tmp_path / 'root')!r})"


def test_settings_and_a_real_entry_agree_with_the_layout(built_adder):
    s = built_adder.settings
    assert s.layout.root == Layout(s.cache_dir).root
    e = built_adder.entry_dir
    assert e.parent.parent == Layout(s.cache_dir).kernel_dir("adder")
    assert len(e.parent.name) == KEY_PREFIX


# outside any cache dir: file -> why
NOT_THE_CACHE = {"dropin/generated.py": "the drop-ins' fallback for read-only caches, under the system temp dir"}
_AREA_WORDS = {"v1", "entries", "fetched", "inline", "dropin", "quarantine", "trash", "toolchain"}


def test_no_other_module_spells_the_layout():
    """Cache paths are built only in layout.py: no other module joins an area name onto a path
    (``base / "v1" / "entries"``, ``"v1/..."``); a second spelling is a future incompatibility
    between releases sharing a cache."""
    spelled = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "layout.py" or str(path.relative_to(PKG)) in NOT_THE_CACHE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                for side in (node.left, node.right):
                    if isinstance(side, ast.Constant) and side.value in _AREA_WORDS:
                        spelled.append(f"{path.relative_to(PKG)}:{node.lineno}: / {side.value!r}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("v1/"):
                spelled.append(f"{path.relative_to(PKG)}:{node.lineno}: {node.value!r}")
    assert not spelled, "\n".join(spelled)


def test_recall_memos_live_where_the_layout_says(tmp_path):
    """A recalled load cannot import the layout (it imports almost nothing); the memo's path is
    built from the same leaf of spellings (formats) and must land in the layout's recall area."""
    from kernelcache.base import layout, warm_facts as memo

    assert memo.memo_path("d" * 40, str(tmp_path)) == str(layout.Layout(tmp_path).recall / ("d" * 40))
