"""FrozenRecord: the one record style, a frozen dataclass in behaviour and to the type checker.

Fields are declared as in a dataclass (``name: type`` or ``name: type = default``, in order);
``typing.dataclass_transform`` tells mypy so, hence ``Settings(no_bulid=True)`` is a type error as
well as a ``TypeError``. Why not ``@dataclass`` itself: it generates each method through ``exec``
(~0.5 ms a class), and every process that imports kernelcache imports the settings
(benchmarks/bench_dropin_import.py); here the field list is read once per class from its
annotations (``__init_subclass__``) and one shared ``__init__`` fills it in.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, ClassVar, TypeVar, cast

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - 3.10: the marker is for type checkers only
    def dataclass_transform(**_: Any) -> Any:
        return lambda cls: cls

_R = TypeVar("_R", bound="FrozenRecord")
_T = TypeVar("_T")
_MISSING = object()


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], _T]) -> _T:
    """A field whose default is made per record (``field(default_factory=dict)``), as dataclasses'."""
    return cast(_T, _Factory(default_factory))


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class FrozenRecord:
    """Frozen-record behaviour of ``@dataclass(frozen=True)``: fields by position or keyword,
    defaults, ``__post_init__``, eq, hash, repr, ``__match_args__``, ``FrozenInstanceError``,
    pickling through ``__dict__`` (so records cross xdist and process boundaries unchanged)."""

    _FIELDS: ClassVar[tuple[str, ...]] = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {}
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [n for n, t in cls.__annotations__.items()  # this class's own (3.10+; lazily built in 3.14)
               if not (str(t).startswith(("ClassVar", "typing.ClassVar")) or n.startswith("__"))]
        fields = [*cls._FIELDS, *(n for n in own if n not in cls._FIELDS)]
        defaults = dict(cls._DEFAULTS)
        for name in own:
            value = cls.__dict__.get(name, _MISSING)
            if value is not _MISSING:
                defaults[name] = value
            else:
                defaults.pop(name, None)
        seen_default = False
        for name in fields:
            if name in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: non-default field {name!r} follows a default field")
        cls._FIELDS = tuple(fields)
        cls._DEFAULTS = defaults
        setattr(cls, "__match_args__", cls._FIELDS)  # (a name mypy reserves for its own synthesis)

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
            if name in values:
                value = values[name]
            else:
                value = self._DEFAULTS[name]
                if type(value) is _Factory:
                    value = value.make()
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        pass

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FrozenRecord) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

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

    def replace(self: _R, **changes: Any) -> _R:
        """A copy with some fields changed (the record is frozen)."""
        for k in changes:
            if k not in self._FIELDS:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {k!r}")
        return type(self)(**{**{f: getattr(self, f) for f in self._FIELDS}, **changes})
