"""A kind from outside the package: a tiny distribution, written and pip-installed by a test.

``kc-toykind`` declares two entry points in group ``kernelcache.kinds``: ``clib`` (a plain C
library, built with its own plan, checked as ELF with plain symbols, no tvm-ffi, loaded with
ctypes) and ``broken_kind`` (a module that raises on import: what a user sees of a broken plugin).
Installed with pip into a target directory (``--no-deps --no-build-isolation``: setuptools from
this venv, no network), so only processes that put that directory on ``sys.path`` know the kinds.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "kc-toykind"
version = "0.1"

[project.entry-points."kernelcache.kinds"]
clib = "kc_toykind:KIND"
broken_kind = "kc_toykind_broken:KIND"

[tool.setuptools]
py-modules = ["kc_toykind", "kc_toykind_broken"]
"""

MODULE = '''\
"""A plain C library loaded with ctypes: a kernelcache kind living outside kernelcache."""
import ctypes

from kernelcache.key import plan as plan_mod
from kernelcache.base.errors import BuildError
from kernelcache.kinds.base import Kind
from kernelcache.entry.validate import BinaryChecks, Rejection, read_identity


def lean_load(path, name):
    """What a recalled call hands out (the entry's identity was checked when it was recorded)."""
    return ctypes.CDLL(path)


class CLib(Kind):
    name = "clib"
    label = "plain C library"
    report_label = "C library"
    checks = BinaryChecks(symbol="{}", schemas=False, tvm_ffi=False)  # ELF, plain symbols
    recall_load = "kc_toykind:lean_load"

    def plan(self, spec, settings):
        p = plan_mod.verbatim_plan(spec, settings, so_name=self.so_name(spec.name), shared=True,
                                   kind_inputs=self.key_inputs())
        p.c_flags = ["-fPIC", "-O2", *(f"-I{spec.abspath(d)}" for d in spec.include_dirs), *p.c_flags]
        return p

    def record(self, spec, so_path):
        lib = ctypes.CDLL(str(so_path))
        missing = [fn for fn in spec.functions if not hasattr(lib, fn)]
        if missing:
            raise BuildError(spec.name, "<load check>", f"the library does not define {missing}")
        return {}, None

    def admit(self, spec, m, path):
        ident = read_identity(path)
        if ident != m.identity:
            return None, Rejection("identity", f"identity {ident!r} != manifest's {m.identity!r}")
        lib = ctypes.CDLL(str(path))
        missing = [fn for fn in spec.functions if not hasattr(lib, fn)]
        if missing:
            return None, Rejection("binary", f"the library does not define {missing}")
        return lib, None


KIND = CLib()
'''

BROKEN = '''\
raise RuntimeError("kc_toykind_broken cannot be imported (on purpose)")
'''


def install(tmp: Path) -> Path:
    """Write the distribution under ``tmp/src`` and pip-install it into ``tmp/site``; returns
    the target directory (put it on ``PYTHONPATH``)."""
    src, site = tmp / "src", tmp / "site"
    src.mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "kc_toykind.py").write_text(MODULE)
    (src / "kc_toykind_broken.py").write_text(BROKEN)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(src)], capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    assert list(site.glob("kc_toykind-0.1.dist-info/entry_points.txt")), sorted(site.iterdir())
    return site
