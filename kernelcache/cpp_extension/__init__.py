"""Drop-in for ``torch.utils.cpp_extension.load`` / ``load_inline``, built and cached by kernelcache.

Change one import::

    from kernelcache import cpp_extension      # instead of: from torch.utils import cpp_extension
    mod = cpp_extension.load_inline("my_ext", cpp_sources=src, functions=["add"])

or none at all: ``kernelcache.cpp_extension.install()`` or
``python -m kernelcache.cpp_extension script.py`` route torch's own functions here.

Same signatures, defaults and results as torch's (plus an optional keyword ``settings``). Every
header the compiler read is keyed by content (an edit whose mtime is not newer is a rebuild,
not a stale module), the build lock is an OS lock that dies with its holder, entries are
content-addressed (two checkouts with one extension name never thrash) and a binary is checked
(manifest, sha256, identity, exported surface) before it is imported. See
docs/torch_cpp_extension_dropin.md.

Importing this module patches nothing and imports neither torch nor tvm_ffi; it imports the two
loading functions' front (``_front``: a call answered before is recalled without the loader, in
less time than torch's own warm call) and the rest on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy
from ._front import load, load_inline

if TYPE_CHECKING:  # pragma: no cover
    from ._api import ExtensionBuildError, inline_files, make_spec
    from ._patch import install, is_installed, uninstall

__all__ = ["load", "load_inline", "install", "uninstall", "is_installed", "make_spec", "inline_files",
           "ExtensionBuildError"]

_LAZY = {"ExtensionBuildError": "_api", "inline_files": "_api", "make_spec": "_api",
         "install": "_patch", "uninstall": "_patch", "is_installed": "_patch"}

__getattr__ = lazy.names(__name__, _LAZY, globals())
