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

Importing this module patches nothing and imports neither torch nor tvm_ffi. It does import
what a warm call runs (the loader, the torch kinds, the generated-sources store): torch's own
``torch.utils.cpp_extension`` pays its imports when it is imported (~270 ms), and a call that
first imports ~25 modules costs more than torch's whole warm call (issue 24).
"""
from __future__ import annotations

from . import _warm  # noqa: F401 - the warm call's modules, imported now rather than in the first call
from ._api import ExtensionBuildError, inline_files, load, load_inline, make_spec
from ._patch import install, is_installed, uninstall

__all__ = ["load", "load_inline", "install", "uninstall", "is_installed", "make_spec", "inline_files",
           "ExtensionBuildError"]
