"""``python -m kernelcache.<drop-in>``: one runner for every drop-in's ``__main__`` — the program
runs under ``python -m kernelcache.patch --jit <drop-in>``; no program, ``-h``: the usage line."""
from __future__ import annotations

import sys


def run(jit: str, usage: str, argv: list[str]) -> int:
    """Run ``argv`` (``[-m MODULE | SCRIPT] [ARGS...]``) with only ``jit`` routed through kernelcache."""
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(usage.strip(), file=sys.stderr)
        return 2
    from ..patch.__main__ import main as patch_main

    return patch_main(["--jit", jit, *argv])
