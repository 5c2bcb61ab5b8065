"""``python -m kernelcache.flashinfer [-m MODULE | SCRIPT] [ARGS...]``: run a program with
FlashInfer's JIT routed through kernelcache (``python -m kernelcache.patch --jit flashinfer``)."""
from __future__ import annotations

import sys

from ..dropin.runner import run


def main(argv: list[str]) -> int:
    return run("flashinfer", __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
