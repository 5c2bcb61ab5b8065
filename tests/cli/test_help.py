"""Every subcommand's --help page has a description and every option has help text."""
from __future__ import annotations

import pytest

from kernelcache.cli import build_parser
from kernelcache.cli.help import undocumented


def test_every_subcommand_and_option_is_documented():
    assert undocumented(build_parser()) == []


def _paths(parser, path=()):
    import argparse

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield (*path, name)
                yield from _paths(sub, (*path, name))


@pytest.mark.parametrize("path", sorted(_paths(build_parser())), ids=" ".join)
def test_help_page_shows_the_description(cli, path):
    r = cli.run(*path, "--help", timeout=60)
    assert r.returncode == 0, r.stderr
    sub = build_parser()
    for name in path:
        sub = next(a for a in sub._actions if hasattr(a, "choices") and isinstance(a.choices, dict)
                   and name in a.choices).choices[name]
    first_words = " ".join(sub.description.split()[:4])
    assert first_words in " ".join(r.stdout.split())
