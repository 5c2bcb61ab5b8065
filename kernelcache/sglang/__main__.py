"""``python -m kernelcache.sglang [-m MODULE | SCRIPT] [ARGS...]``: run a program with SGLang's
JIT (``load_jit``) routed through kernelcache (``python -m kernelcache.patch --jit sglang``)."""
from __future__ import annotations

import sys

from ..patch.__main__ import main as _patch_main


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return _patch_main(["--jit", "sglang", *argv])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
