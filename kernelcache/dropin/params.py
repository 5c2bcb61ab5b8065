"""One declared table per foreign function a drop-in stands in for: each of its parameters is in
the recall digest, or declared as not changing the answer, with why.

Why: a drop-in front used to spell the foreign signature three times by hand (its own
signature, the recall digest's tuple, the call through to the full path), so a parameter a new
release adds could be accepted and left out of the digest, and a recalled call would answer for
arguments it never saw. From one table the front derives the digest (:meth:`ParamTable.digest`),
the call through (:meth:`ParamTable.bind`) and the check against the installed foreign function
(:meth:`ParamTable.gaps`: a parameter neither in the digest nor declared is a gap; tests run it
against the real torch, tvm-ffi, FlashInfer and SGLang).

Plain slotted classes, not dataclasses: a front imports this on the warm path of a fresh process.
"""
from __future__ import annotations

import inspect
from importlib import import_module
from typing import Any, Callable, Mapping


class Param:
    """One foreign parameter: ``keyed`` (in the recall digest, as ``plain(value)`` when given) or
    not, and then ``why`` it cannot change the answer (required)."""

    __slots__ = ("name", "keyed", "why", "plain")

    def __init__(self, name: str, keyed: bool = True, why: str = "",
                 plain: Callable[[Any], Any] | None = None) -> None:
        if not keyed and not why:
            raise ValueError(f"parameter {name!r} is left out of the digest without saying why")
        self.name, self.keyed, self.why, self.plain = name, keyed, why, plain

    def __repr__(self) -> str:
        return f"Param({self.name!r}{'' if self.keyed else ', keyed=False'})"


def ignored(name: str, why: str) -> Param:
    """A parameter that cannot change the answer (not in the digest), and why."""
    return Param(name, keyed=False, why=why)


class ParamTable:
    """The parameters of ``foreign`` (``MODULE:QUALNAME``, the installed function or class), in
    its signature's order."""

    __slots__ = ("foreign", "params", "names", "keyed")

    def __init__(self, foreign: str, params: tuple[Param, ...]) -> None:
        self.foreign = foreign
        self.params = params
        self.names = tuple(p.name for p in params)
        self.keyed = tuple(p for p in params if p.keyed)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"{foreign}: a parameter is declared twice")

    def digest(self, args: Mapping[str, Any]) -> tuple:
        """The keyed arguments, in the table's order, as the digest takes them."""
        return tuple(p.plain(args[p.name]) if p.plain is not None else args[p.name] for p in self.keyed)

    def fields(self, record: Any) -> dict[str, Any]:
        """Every parameter's value read from a record (a foreign dataclass such as FlashInfer's)."""
        return {n: getattr(record, n) for n in self.names}

    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's argument by name: the call through to the full path."""
        return {n: args[n] for n in self.names}

    def unknown(self, kwargs: Mapping[str, Any]) -> list[str]:
        """Keyword arguments the foreign function does not take (its TypeError's subject)."""
        return sorted(set(kwargs) - set(self.names))

    def resolve(self) -> Any:
        """The installed foreign function (imports the foreign package)."""
        module, _, qual = self.foreign.partition(":")
        obj: Any = import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj

    def gaps(self, fn: Any = None) -> list[str]:
        """What the installed function (or ``fn``) and the table disagree on: a foreign parameter
        the table neither keys nor declares (a recalled call would ignore it), or one the table
        names that the function no longer takes. Empty: the table is the signature."""
        fn = self.resolve() if fn is None else fn
        have = [n for n in inspect.signature(fn).parameters if n != "self"]
        out = [f"{self.foreign}: parameter {n!r} is neither in the digest nor declared as not changing the answer"
               for n in have if n not in self.names]
        out += [f"{self.foreign}: the table names {n!r}, which the installed function does not take"
                for n in self.names if n not in have]
        if not out and list(have) != list(self.names):
            out.append(f"{self.foreign}: parameters in another order: {have} (table: {list(self.names)})")
        return out
