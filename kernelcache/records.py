"""FrozenRecord: the behaviour of a frozen dataclass for records on every process's import path."""
from __future__ import annotations

from typing import Any


class FrozenRecord:
    """Frozen-record behaviour of ``@dataclass(frozen=True)`` (fields by position or keyword,
    defaults, ``__post_init__``, eq, hash, repr, ``FrozenInstanceError``, pickling through
    ``__dict__``) without its class-creation cost: ``@dataclass`` generates each method through
    ``exec`` (~0.5 ms a class), and every process that imports kernelcache imports the settings
    (benchmarks/bench_dropin_import.py). Subclasses list ``_FIELDS`` and ``_DEFAULTS``."""

    _FIELDS: tuple[str, ...] = ()
    _DEFAULTS: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self).__name__
        if len(args) > len(self._FIELDS):
            raise TypeError(f"{cls}() takes {len(self._FIELDS)} positional arguments but {len(args)} were given")
        values = dict(zip(self._FIELDS, args))
        for k, v in kwargs.items():
            if k not in self._FIELDS:
                raise TypeError(f"{cls}.__init__() got an unexpected keyword argument {k!r}")
            if k in values:
                raise TypeError(f"{cls}.__init__() got multiple values for argument {k!r}")
            values[k] = v
        for name in self._FIELDS:
            if name not in values and name not in self._DEFAULTS:
                raise TypeError(f"{cls}.__init__() missing required argument: {name!r}")
            object.__setattr__(self, name, values[name] if name in values else self._DEFAULTS[name])
        self.__post_init__()

    def __post_init__(self) -> None:
        pass

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self._FIELDS) + ")"

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def replace(self, **changes: Any) -> Any:
        """A copy with some fields changed (the record is frozen)."""
        for k in changes:
            if k not in self._FIELDS:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {k!r}")
        return type(self)(**{**{f: getattr(self, f) for f in self._FIELDS}, **changes})
