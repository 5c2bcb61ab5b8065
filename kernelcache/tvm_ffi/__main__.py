"""``python -m kernelcache.tvm_ffi [-m MODULE | SCRIPT] [ARGS...]``: run a program with tvm_ffi.cpp
routed through kernelcache, without editing it and without a ``.pth`` hook."""
from __future__ import annotations

import runpy
import sys

from . import install


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
