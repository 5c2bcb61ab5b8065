"""One declared table per foreign function a drop-in stands in for: each of its parameters is in
the recall digest, or declared as not changing the answer, with why.

Why: a drop-in front used to spell the foreign signature three times by hand (its own
signature, the recall digest's tuple, the call through to the full path), so a parameter a new
release adds could be accepted and left out of the digest, and a recalled call would answer for
arguments it never saw. From one table the front derives the digest (:func:`digest`), the call
through (:func:`bind`) and the check against the installed foreign function (:func:`gaps`: a
parameter neither in the digest nor declared is a gap; tests run it against the real torch,
tvm-ffi, FlashInfer and SGLang).

A table is plain data, ``(FOREIGN, NAMES, WHY, PLAIN)``: ``"MODULE:QUALNAME"`` of the installed
function (or record class), every parameter in its signature's order, ``{parameter: why it
cannot change the answer}`` for those left out of the digest, and ``{parameter: normaliser}``
for keyed ones the digest takes normalised. Plain tuples and dicts, not records: the tvm-ffi
front declares its tables on the warm path of a fresh process, where every object kept alive
counts (``tests/dropin/test_recall.py``: a recalled load stays under a pending collection).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

Table = tuple[str, tuple[str, ...], Mapping[str, str], Mapping[str, Callable[[Any], Any]]]


def table(foreign: str, names: tuple[str, ...], why: Mapping[str, str],
          plain: Mapping[str, Callable[[Any], Any]] | None = None) -> Table:
    """A checked table: names unique, each parameter left out says why, normalisers only for keyed ones."""
    if len(set(names)) != len(names):
        raise ValueError(f"{foreign}: a parameter is declared twice")
    for name, reason in why.items():
        if name not in names:
            raise ValueError(f"{foreign}: {name!r} is declared as not changing the answer but is no parameter")
        if not str(reason).strip():
            raise ValueError(f"{foreign}: parameter {name!r} is left out of the digest without saying why")
    plain = dict(plain or {})
    if set(plain) - (set(names) - set(why)):
        raise ValueError(f"{foreign}: normalisers for parameters that are not keyed: {sorted(set(plain) - set(names))}")
    return foreign, tuple(names), dict(why), plain


def keyed(t: Table) -> tuple[str, ...]:
    """The parameters the digest takes, in the table's order."""
    return tuple(n for n in t[1] if n not in t[2])


def digest(t: Table, args: Mapping[str, Any]) -> tuple:
    """The keyed arguments, in the table's order, as the digest takes them."""
    plain = t[3]
    return tuple(plain[n](args[n]) if n in plain else args[n] for n in t[1] if n not in t[2])


def bind(t: Table, args: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter's argument by name: the call through to the full path."""
    return {n: args[n] for n in t[1]}


def fields(t: Table, record: Any) -> dict[str, Any]:
    """Every parameter's value read from a record (a foreign dataclass such as FlashInfer's)."""
    return {n: getattr(record, n) for n in t[1]}


def resolve(t: Table) -> Any:
    """The installed foreign function or class (imports the foreign package)."""
    from importlib import import_module

    module, _, qual = t[0].partition(":")
    obj: Any = import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def gaps(t: Table, fn: Any = None) -> list[str]:
    """What the installed function (or ``fn``) and the table disagree on: a foreign parameter the
    table neither keys nor declares (a recalled call would ignore it), one the table names that
    the function no longer takes, or another order. Empty: the table is the signature."""
    import inspect  # (never on a front's warm path)

    fn = resolve(t) if fn is None else fn
    have = [n for n in inspect.signature(fn).parameters if n != "self"]
    out = [f"{t[0]}: parameter {n!r} is neither in the digest nor declared as not changing the answer"
           for n in have if n not in t[1]]
    out += [f"{t[0]}: the table names {n!r}, which the installed function does not take" for n in t[1] if n not in have]
    if not out and have != list(t[1]):
        out.append(f"{t[0]}: parameters in another order: {have} (table: {list(t[1])})")
    return out
