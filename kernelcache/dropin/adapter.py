"""One drop-in's patch state: what it replaced, how to put it back, and the routed wrappers.

Why one class: every drop-in needs the same four things and they must agree. The originals are
saved the first time only (installing twice must never save our own replacement as "original",
or a fallback would call itself); a replacement is recognisable (``__kernelcache_dropin__``) so
``uninstall()`` restores only what is still ours; the installed settings are the base of every
routed call (call-time rule: :mod:`.call_settings`); and it all happens under one lock.

Targets are modules or classes (FlashInfer's ``JitSpecNvcc``): on a class the raw attribute
(a property or a plain function, never a bound one) is saved and restored; one it inherits is
set on the class itself and deleted again by ``uninstall()``.
"""
from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

MARK = "__kernelcache_dropin__"


def is_ours(value: Any) -> bool:
    """Is ``value`` a drop-in's replacement (a routed function or property)?"""
    return bool(getattr(value, MARK, False))


class RoutedProperty(property):
    """A property a drop-in installed (properties take no attributes, so the mark is the class's)."""

    __kernelcache_dropin__ = True


def routed(target: Callable[..., Any], base: Any) -> Callable[..., Any]:
    """``target`` with ``settings=base`` as the default keyword (``base`` None: none given, each
    call resolves its own), marked as a drop-in's replacement."""

    @functools.wraps(target)
    def call(*args: Any, **kwargs: Any) -> Any:
        if base is not None:
            kwargs.setdefault("settings", base)
        return target(*args, **kwargs)

    setattr(call, MARK, True)
    return call


class Adapter:
    """Patch ``attrs`` on the objects ``targets()`` returns with what ``replace`` makes.

    ``targets``: label -> module or class, resolved at install time (importing the foreign JIT).
    ``replace(attr, settings)``: the replacement of one attribute for these installed settings.
    ``on_install(originals)``: told the saved originals ({(label, attr): original}) before the
    attributes are replaced, so the drop-in's fallbacks reach the foreign code, never itself.
    """

    def __init__(self, name: str, targets: Callable[[], Mapping[str, Any]], attrs: tuple[str, ...],
                 replace: Callable[[str, "Settings | None"], Any],
                 on_install: Callable[[dict[tuple[str, str], Any]], None] | None = None) -> None:
        self.name = name
        self.attrs = attrs
        self._targets = targets
        self._replace = replace
        self._on_install = on_install
        self._lock = threading.RLock()
        self._saved: dict[tuple[str, str], Any] = {}
        self._inherited: set[tuple[str, str]] = set()  # class attributes found on a base class
        self._installed: list["Settings | None"] = []  # one element while installed

    @staticmethod
    def _raw(obj: Any, attr: str) -> Any:
        if isinstance(obj, type):
            import inspect

            return inspect.getattr_static(obj, attr)
        return getattr(obj, attr)

    def is_installed(self) -> bool:
        return bool(self._installed)

    @property
    def settings(self) -> "Settings | None":
        """The settings ``install()`` gave (None: each call's environment)."""
        return self._installed[0] if self._installed else None

    def original(self, attr: str, label: str | None = None) -> Any:
        """The foreign attribute saved at install (the first target's, unless ``label`` says)."""
        if label is None:
            label = next((lab for (lab, a) in self._saved if a == attr), None)
        return self._saved[(label, attr)]  # type: ignore[index]

    def originals(self) -> dict[tuple[str, str], Any]:
        return dict(self._saved)

    def install(self, settings: "Settings | None" = None) -> None:
        """Replace every attribute (again: new settings, originals kept)."""
        objs = self._targets()
        with self._lock:
            for label, obj in objs.items():
                for attr in self.attrs:
                    current = self._raw(obj, attr)
                    if not is_ours(current):
                        self._saved[(label, attr)] = current
                        if isinstance(obj, type) and attr not in vars(obj):
                            self._inherited.add((label, attr))
            if self._on_install is not None:
                self._on_install(dict(self._saved))
            for obj in objs.values():
                for attr in self.attrs:
                    setattr(obj, attr, self._replace(attr, settings))
            self._installed[:] = [settings]

    def uninstall(self) -> None:
        """Put the foreign attributes back where ours still are (a no-op when not installed)."""
        with self._lock:
            if not self._installed:
                return
            objs = self._targets()
            for (label, attr), original in self._saved.items():
                obj = objs.get(label)
                if obj is not None and is_ours(self._raw(obj, attr)):
                    if (label, attr) in self._inherited:
                        delattr(obj, attr)
                    else:
                        setattr(obj, attr, original)
            self._installed.clear()
