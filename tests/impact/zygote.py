"""A pre-imported pytest for many short full runs: imports pytest, kernelcache and tvm-ffi once,
then forks one child per request, which runs ``pytest.main`` in a project directory.

Why: the property test needs hundreds of real full runs of a tiny project, and a fresh
interpreter spends seconds importing tvm-ffi on a loaded machine, the tests milliseconds. A
forked child is a fresh pytest session (new config, new collection, the project's modules never
imported here), with the cost of ``fork``. Protocol: one JSON request per stdin line
(``cwd``, ``args``, ``env``, ``log``), one JSON reply per stdout line (``rc``).
"""
from __future__ import annotations

import json
import os
import sys


def _child(req: dict) -> None:
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(req["cwd"])
    for k in [k for k in os.environ if k.startswith(("KERNELCACHE_", "PYTEST_"))]:
        del os.environ[k]
    os.environ.update(req["env"])
    import pytest

    try:  # the project's directory importable, as ``python -m pytest`` run there has it
        rc = int(pytest.main(["-o", f"pythonpath={req['cwd']}", *req["args"]]))
    except BaseException:  # noqa: BLE001 - reported through the exit status
        import traceback

        traceback.print_exc()
        rc = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


# what a child's session imports (the loader's path for a C-ABI kernel, pytest's default
# plugins): imported here once, not per child (-p kernelcache marks the package for assertion
# rewriting, so each child would parse and compile them again)
PRELOAD = ("kernelcache.lookup.loader", "kernelcache.lookup.search", "kernelcache.entry.validate", "kernelcache.kinds.tvm_ffi",
           "kernelcache.storage.local", "kernelcache.storage.prebuilt", "kernelcache.impact.api",
           "kernelcache.impact.record", "kernelcache.pytest_plugin", "pdb", "xml.etree.ElementTree")


def main() -> None:
    import gc
    import importlib

    import pytest  # noqa: F401 - imported once, inherited by every child
    import tvm_ffi  # noqa: F401
    from _pytest.config import default_plugins

    for name in (*PRELOAD, *(f"_pytest.{p}" for p in default_plugins)):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a default plugin of another pytest version
    # torch (imported by tvm-ffi) leaves ~10^6 objects: frozen, so the gc.collect() that pytest
    # runs at the end of every session does not walk them in every child
    gc.freeze()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
