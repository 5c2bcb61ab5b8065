"""The README's and docs' runnable snippets run as written (marked ``<!-- doc-test: ... -->``).

They run in a subprocess with this session's settings (the plugin exports them), so kernels the
session warmed are hits; the only compile is the README's own tiny kernel.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.markdown import REPO, snippets

KERNELS = {"ngram": ("ngram_corpus",)}  # snippet id -> shipped kernels it uses (warmed by the session)


def _params():
    out = []
    for sn in snippets():
        marks = [pytest.mark.kernel(*KERNELS[sn.ident])] if sn.ident in KERNELS else []
        out.append(pytest.param(sn, id=f"{sn.doc}:{sn.ident}", marks=marks))
    return out


def test_the_docs_mark_runnable_snippets():
    ids = {(s.doc, s.ident) for s in snippets()}
    assert {("README.md", "own-kernel"), ("README.md", "ngram")} <= ids
    for s in snippets():
        assert s.runs, f"{s.doc}:{s.ident} has files but nothing to run"


@pytest.mark.parametrize("snippet", _params())
def test_snippet_runs_as_written(snippet, tmp_path: Path):
    for rel, text in snippet.files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for i, code in enumerate(snippet.runs):
        main = tmp_path / ("main.py" if i == 0 else f"main{i}.py")
        main.write_text(code)
        r = subprocess.run([sys.executable, str(main)], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"{snippet.doc}:{snippet.ident} block {i}:\n{r.stdout}\n{r.stderr}"
