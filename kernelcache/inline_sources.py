"""Kept for ``kernelcache.cpp_extension._api`` (owned by the torch drop-in's maintainers): the
generated sources now live in :mod:`kernelcache.dropin.generated`, the drop-ins' shared base."""
from __future__ import annotations

from .dropin.generated import discard, materialize

__all__ = ["discard", "materialize"]
