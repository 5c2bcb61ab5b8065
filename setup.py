"""Ships ``kernelcache-patch.pth`` at the top of site-packages (pyproject.toml holds the rest).

Why a .pth: ``KERNELCACHE_PATCH=tvm_ffi python app.py`` must work when ``app.py`` never imports
kernelcache. The line costs two environment lookups at interpreter start and imports kernelcache
(which arms the import hooks of kernelcache.patch) only when one of the variables is set.
setuptools has no declarative way to put a file next to the packages, so: ``build_py`` copies it
into the wheel's root, and the editable wheel (``pip install -e``) gets it the same way.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path(__file__).resolve().parent / "kernelcache" / "patch" / "kernelcache-patch.pth"


class build_py_with_pth(build_py):  # noqa: N801 - setuptools command naming
    def run(self) -> None:
        super().run()
        shutil.copyfile(PTH, Path(self.build_lib) / PTH.name)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]


cmdclass: dict = {"build_py": build_py_with_pth}
try:
    from setuptools.command.editable_wheel import editable_wheel

    class editable_wheel_with_pth(editable_wheel):  # noqa: N801
        def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[override]
            out = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
            shutil.copyfile(PTH, Path(unpacked_wheel) / PTH.name)
            return out

    cmdclass["editable_wheel"] = editable_wheel_with_pth
except ImportError:  # setuptools < 64: no PEP 660 editable wheels (legacy develop installs lack the hook)
    pass

setup(cmdclass=cmdclass)
