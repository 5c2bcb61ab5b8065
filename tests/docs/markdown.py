"""Reading the docs as data: fenced blocks marked for testing, code spans, commands in them.

A block is marked runnable by an HTML comment right before its fence (invisible when rendered):
``<!-- doc-test: file ID PATH -->`` writes the block to PATH, ``<!-- doc-test: run ID -->``
runs a Python block as ``main.py``; blocks of one ID run together, in one directory.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_MARK = re.compile(r"<!--\s*doc-test:\s*(file|run)\s+(\S+)(?:\s+(\S+))?\s*-->")
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")


@dataclass
class Snippet:
    doc: str
    ident: str
    files: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)


@dataclass
class Fence:
    lang: str
    text: str
    line: int
    mark: tuple[str, str, str | None] | None


def fences(path: Path) -> list[Fence]:
    lines = path.read_text().splitlines()
    out: list[Fence] = []
    i, mark = 0, None
    while i < len(lines):
        m = _MARK.search(lines[i])
        if m:
            mark = (m.group(1), m.group(2), m.group(3))
            i += 1
            continue
        f = _FENCE.match(lines[i].strip())
        if f:
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(f.group(1)):
                j += 1
            out.append(Fence(f.group(2), "\n".join(lines[i + 1:j]) + "\n", i + 1, mark))
            mark = None
            i = j + 1
            continue
        if lines[i].strip():
            mark = None  # a mark applies to the fence right after it only
        i += 1
    return out


def snippets() -> list[Snippet]:
    by_id: dict[tuple[str, str], Snippet] = {}
    for doc in DOCS:
        for f in fences(doc):
            if f.mark is None:
                continue
            kind, ident, path = f.mark
            sn = by_id.setdefault((doc.name, ident), Snippet(doc.name, ident))
            if kind == "file":
                assert path, f"{doc.name}:{f.line}: doc-test file needs a path"
                sn.files[path] = f.text
            else:
                sn.runs.append(f.text)
    return list(by_id.values())


def prose(path: Path) -> str:
    """The document without its fenced blocks."""
    text = path.read_text()
    return re.sub(r"^(```+|~~~+).*?^\1\s*$", "", text, flags=re.S | re.M)


def code_spans(path: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose(path))


def code_lines(path: Path) -> list[str]:
    """Every line of a shell-like fenced block (bash, sh, yaml, toml, none) and every code span."""
    out = []
    for f in fences(path):
        if f.lang in ("", "bash", "sh", "shell", "console", "yaml", "yml", "toml", "text"):
            out += f.text.splitlines()
    return out + code_spans(path)
