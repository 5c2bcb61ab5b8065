"""What the README and docs name exists and works as named: every ``kernelcache`` command line
parses, every ``--kc-*`` flag is registered, path flags are written in the ``=`` form the plugin
requires, and every ``KERNELCACHE_*`` variable is read somewhere. A promise the code does not
keep fails here."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import pytest

from kernelcache.cli import build_parser
from tests.docs.markdown import DOCS, REPO, code_lines

_CMD = re.compile(r"(?:^|[\s;(&|]|^\S*/)kernelcache ((?:[a-z][a-z-]*)(?:[^#`|;&]*)?)")


def _commands() -> list[tuple[str, str]]:
    """(doc, argv text) of every ``kernelcache SUBCOMMAND ...`` written as code."""
    out = []
    for doc in DOCS:
        for line in code_lines(doc):
            for m in _CMD.finditer(line):
                if line[:m.start(1)].rstrip().removesuffix("kernelcache").rstrip().endswith(("-p", "--plugin=")):
                    continue  # pytest -p kernelcache ...: the plugin, not the CLI
                cmd = m.group(1).strip()
                if " / " in cmd or "/" in cmd.split(" ")[0] or cmd.startswith(("as ", "import", "is ")) or "..." in cmd.replace("NAME...", ""):
                    continue
                out.append((doc.name, cmd))
    return sorted(set(out))


def _argv(cmd: str) -> list[str]:
    cmd = cmd.replace("[", "").replace("]", "").replace("NAME...", "NAME")
    return [t.split("|")[0] for t in shlex.split(cmd)]


def test_docs_name_commands():
    assert len(_commands()) >= 10  # the extraction itself works


@pytest.mark.parametrize("doc,cmd", _commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_documented_command_parses(doc, cmd):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(_argv(cmd))
        except SystemExit as e:
            assert e.code == 0, f"{doc}: `kernelcache {cmd}` does not parse: {err.getvalue().strip()}"


@pytest.fixture(scope="module")
def plugin_help(tmp_path_factory) -> str:
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", "--help"],
                       cwd=tmp_path_factory.mktemp("help"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_documented_kc_flag_is_registered(plugin_help):
    registered = set(re.findall(r"--kc-[a-z-]+", plugin_help))
    missing = {(doc.name, f) for doc in DOCS for f in re.findall(r"--kc-[a-z][a-z-]*[a-z]", doc.read_text())
               if f not in registered}
    assert not missing


def test_documented_path_flags_use_the_equals_form():
    from kernelcache.pytest_plugin.options import path_flags

    bad = []
    for doc in DOCS:
        for line in code_lines(doc):
            for flag in path_flags():
                for m in re.finditer(re.escape(flag) + r" +([^\s`|#]+)", line):
                    if not m.group(1).startswith("-"):
                        bad.append((doc.name, line.strip()))
    assert not bad, "space form of a path flag (pytest reads PATH as a test path): " + repr(bad)


def test_every_documented_variable_is_read_by_the_code():
    code = "\n".join(p.read_text() for d in ("kernelcache", "ci") for p in (REPO / d).rglob("*")
                     if p.is_file() and p.suffix in (".py", "") and "__pycache__" not in p.parts)
    named = {v for doc in DOCS for v in re.findall(r"KERNELCACHE_[A-Z0-9_]*[A-Z0-9]", doc.read_text())}
    assert named and not {v for v in named if v not in code}

