"""``python -m kernelcache.sglang [-m MODULE | SCRIPT] [ARGS...]``: run a program with SGLang's
JIT (``load_jit``) routed through kernelcache (``python -m kernelcache.patch --jit sglang``)."""
from __future__ import annotations

import sys

from ..dropin.runner import run


def main(argv: list[str]) -> int:
    return run("sglang", __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
