"""torch's in-process versioning of extension names, and the identity check of what is handed out.

Why: a pybind11 module cannot be imported twice under one name in a process (pybind11 3 keeps
every module it created by name and hands that module back to a later import of another file;
older pybind11 and CPython cache by name too). torch therefore renames a changed extension
loaded again in the same process: ``name``, then ``name_v1``, ``name_v2`` ... (its
``ExtensionVersioner``: a hash of the source files and build arguments per name). The drop-in
does the same, so a second ``load_inline("ext", new_code)`` returns the module built from the
new code, under torch's module name.

Unlike torch, inputs seen before keep their version (going back to the first code gets the
module already loaded, not a third build), and every module handed out is checked by identity:
the cache entry it came from (its id derives from the key and every file the compiler read) must
be the entry the load resolved to. A module that belongs to another entry (same name, inputs that
differ only in a header) makes the caller pick the next version instead of getting stale code.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Any, Iterable

from ..base import process_state

NAME_DEFINE = "-DTORCH_EXTENSION_NAME="


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.versions: dict[str, dict[str, int]] = {}  # name -> {input digest: version}
        self.owners: dict[int, tuple[Any, str]] = {}  # id(module) -> (module, entry id)


_state = _State()


def _forget() -> None:
    with _state.lock:
        _state.versions.clear()
        _state.owners.clear()


process_state.register("cpp_extension.versions", _forget)


def digest(sources: Iterable[str], flag_lists: Iterable[Iterable[str]], facts: Iterable[str]) -> str:
    """What torch's versioner hashes: source bytes and build arguments (the name define left out,
    it is what the version changes)."""
    h = hashlib.sha256(b"kernelcache torch versions v1\0")
    for path in sources:
        with open(path, "rb") as f:
            data = f.read()
        h.update(f"{len(path)}:{path}:{len(data)}:".encode())
        h.update(data)
    for flags in flag_lists:
        kept = [f for f in flags if not f.startswith(NAME_DEFINE)]
        h.update(("\0".join(kept) + "\1").encode())
    h.update("\0".join(facts).encode())
    return h.hexdigest()


def module_name(name: str, version: int) -> str:
    """torch's spelling: ``name`` for version 0, ``name_v<N>`` after."""
    return name if version == 0 else f"{name}_v{version}"


def version_for(name: str, input_digest: str) -> tuple[int, bool]:
    """(version of these inputs, whether it is new in this process).

    Inputs loaded before keep their version; new inputs get the next one after every version
    loaded under this name (a failed build takes no version: the fixed code gets its number).
    """
    with _state.lock:
        seen = _state.versions.get(name, {})
        if input_digest in seen:
            return seen[input_digest], False
        return max(seen.values(), default=-1) + 1, True


def loaded(name: str, input_digest: str, version: int) -> None:
    """Record that these inputs are loaded under ``version`` in this process."""
    with _state.lock:
        _state.versions.setdefault(name, {})[input_digest] = version


def bump(name: str, version: int) -> int:
    """The version after ``version`` and every loaded one (the module name was taken by another binary)."""
    with _state.lock:
        return max(version, *_state.versions.get(name, {}).values()) + 1


def claim(module: Any, entry_id: str) -> bool:
    """Record that ``module`` was loaded from entry ``entry_id``; False when it belongs to another.

    The module object is kept alive with its record, so its id is never reused while recorded.
    """
    with _state.lock:
        owner = _state.owners.get(id(module))
        if owner is None:
            _state.owners[id(module)] = (module, entry_id)
            return True
        return owner[1] == entry_id
