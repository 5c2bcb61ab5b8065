"""The environment part of the property test's project (issue 38): a header-only wheel (built and
installed with pip by :mod:`.test_environment`'s helpers) in a target directory its test files
import from; kernel ``kw`` includes its header through ``include_dirs=[hdrpkg.include_dir()]``
and a test checks the package's version. An upgrade installs another version there: the
repository does not change, the kernel rebuilds, the tests' outcomes move."""
from __future__ import annotations

import random
from pathlib import Path

from .test_environment import build_wheel, pip_install

ENV_TESTS = {"tests/test_w.py::test_w", "tests/test_w.py::test_w_version"}
VERSIONS = (1, 2, 3)


def env_files(site: Path) -> dict[str, str]:
    return {
        "csrc/kern_w/w.cc": '#include <tvm/ffi/c_api.h>\n#include "../common/export.h"\n#include <hdr/val.h>\n'
                            "KC_EXPORT(fw, HDR_VAL)\n",
        "tests/test_w.py": f"""\
import sys
from pathlib import Path

sys.path.insert(0, "{site}")  # the environment the header package lives in
import hdrpkg  # noqa: E402
import kernelcache as kc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "csrc" / "kern_w"


def test_w():
    spec = kc.KernelSpec(name="kw", sources=["w.cc"], root=ROOT, include_dirs=[hdrpkg.include_dir()])
    assert kc.load(spec).fw(0) == 1


def test_w_version():
    assert hdrpkg.__version__ == "1"
""",
    }


class Environment:
    """The target directory and the version installed there now."""

    def __init__(self, base: Path):
        self.site = base / "site"
        self.wheels = base / "wheels"
        self.version = 1
        pip_install(build_wheel(self.wheels, "1", 1), self.site)

    def upgrade(self, rng: random.Random) -> str:
        old = self.version
        self.install(rng.choice([v for v in VERSIONS if v != self.version]))
        return f"environment: hdrpkg {old} -> {self.version}"

    def install(self, version: int) -> None:
        """``version`` installed (an upgrade, or back to the version of the state an edit left)."""
        if version != self.version or not self.site.exists():
            pip_install(build_wheel(self.wheels, str(version), version), self.site)
        self.version = version
