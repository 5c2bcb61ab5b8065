"""``python -m kernelcache.patch [--jit NAMES] [-m MODULE | SCRIPT] [ARGS...]``

Run a program with foreign JIT APIs routed through kernelcache, without editing it.
NAMES: comma separated drop-ins (tvm_ffi, torch, flashinfer, sglang) or all (default: every drop-in this
kernelcache has). Each is installed when the program imports its target (tvm_ffi.cpp,
torch.utils.cpp_extension, flashinfer.jit.core,
sglang.kernels.jit.utils.compile.loader); builds read the environment of each call.
"""
from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str]) -> int:
    from . import PatchError, arm

    which, strict = "all", False
    while argv and argv[0].startswith("--jit"):
        if argv[0] == "--jit" and len(argv) > 1:
            which, argv = argv[1], argv[2:]
        elif argv[0].startswith("--jit="):
            which, argv = argv[0].split("=", 1)[1], argv[1:]
        else:
            break
        strict = True
    if not argv or argv[0] in ("-h", "--help") or argv[0].startswith("--") or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        arm(which, strict=strict)
    except (ValueError, PatchError) as e:
        print(f"kernelcache.patch: {e}", file=sys.stderr)
        return 2
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python SCRIPT` does
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
