"""``python -m kernelcache.tvm_ffi [-m MODULE | SCRIPT] [ARGS...]``: run a program with tvm_ffi.cpp
routed through kernelcache, without editing it (``python -m kernelcache.patch --jit tvm_ffi``)."""
from __future__ import annotations

import sys

from ..dropin.runner import run


def main(argv: list[str]) -> int:
    return run("tvm_ffi", __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
