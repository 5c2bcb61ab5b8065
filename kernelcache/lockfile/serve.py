"""Locked serving: ``KERNELCACHE_LOCK=PATH`` refuses, before any build step, a kernel the lock
lacks or whose inputs or key here differ from the locked ones; :func:`preload` loads and
validates the whole locked set at startup.

Why before the pipeline: "never compiles" must hold on a node without a compiler and with a
read-only cache or root, so the check needs nothing but the lock, the sources' bytes and the
toolchain-free source key (``kernelcache.key.source_key``). ``KERNELCACHE_LOCK_MODE=warn`` says the
same line (a ``lock_drift`` event, shown as a progress line) and lets the load go on.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..base import basis, events, process_state
from ..base.errors import LockViolation
from ..base.settings import Settings, resolve
from ..base.spec import KernelSpec
from .drift import drift
from .format import HOST_ARCH, KernelLock, LockFile, read

if TYPE_CHECKING:  # pragma: no cover
    from ..base.result import WarmResult

_memo: dict[str, tuple[tuple[int, ...], LockFile]] = {}  # path -> (stat, lock)


def _forget() -> None:
    _memo.clear()


process_state.register("lockfile.serve.memo", _forget)


def lock_of(path: str | os.PathLike[str]) -> LockFile:
    """The lock at ``path``, parsed once per content (size, mtime, ctime, inode)."""
    p = os.path.abspath(path)
    try:
        st = os.stat(p)
        stamp: tuple[int, ...] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    except OSError:
        stamp = (-1, -1, -1, -1)
    got = _memo.get(p)
    if got is not None and got[0] == stamp:
        lock = got[1]
    else:
        lock = read(p)
        _memo[p] = (stamp, lock)
    if stamp[0] >= 0:  # the lock this load is checked against: a recalled call must find it again
        basis.note(p, stamp)
    return lock


def enforce(spec: KernelSpec, s: Settings) -> None:
    """Raise :class:`LockViolation` (mode ``error``) or emit ``lock_drift`` (mode ``warn``)
    when the lock at ``s.lock`` does not describe ``spec`` here (the full check: every input
    re-hashed, the source key computed; :func:`served` runs it only after a mismatch)."""
    assert s.lock is not None
    _refuse(spec, s, drift(lock_of(s.lock).kernels.get(spec.name), spec, s, s.lock))


def _refuse(spec: KernelSpec, s: Settings, lines: list[str]) -> None:
    if not lines:
        return
    assert s.lock is not None
    if s.lock_mode == "warn":
        events.emit(events.Event.LOCK_DRIFT, name=spec.name, reason="; ".join(lines), lock=str(s.lock))
        return
    events.emit(events.Event.LOCK_REFUSED, name=spec.name, reason="; ".join(lines), lock=str(s.lock))
    raise LockViolation(spec.name, lines, str(s.lock))


def is_locked_entry(k: KernelLock, spec: KernelSpec, s: Settings, entry_path: str) -> bool:
    """Is the entry the loader served for ``spec`` the one ``k`` locks on this host? Its source
    key is the locked one for this host's arch label (the loader served it because it fits this
    host: a local hit by the level-1 key it computed here, which covers everything the source key
    does; a prebuilt or fleet entry by this host's source key), and the
    headers under the root it was built from (which the loader verified on disk, the stat rule
    re-hashing any whose ctime moved) are the locked ones, by content."""
    from .record import arch_label

    rec = k.archs.get(arch_label(spec, s)[1])
    got = _served_facts(entry_path) if rec is not None else None
    if rec is None or got is None or not got[0] or got[0] != rec.source_key:
        return False
    return got[1] == {rel: h for rel, h in k.inputs.items() if h.startswith("xxh3:")}


def _served_facts(entry_path: str) -> tuple[str, dict[str, str]] | None:
    """(source key, root-relative header -> ``xxh3:<hex>``) of an entry: from its packed hit
    record (what the loader's hit just read: no JSON parsed), else from its manifest."""
    from ..entry import deprecord, manifest as manifest_mod
    from ..host.anchors import ROOT

    prefix = ROOT + "/"
    rec = deprecord.load(Path(entry_path), manifest_mod.FILENAME)
    if rec is not None:
        blob, mark = rec.dep_paths + rec.trusted_paths, b"\0" + os.fsencode(prefix)
        n = blob.count(b"\0")
        w = len(rec.hashes) // n if n else 0
        deps, at = {}, blob.find(mark)
        while at >= 0:  # only the root's few headers, not every system header the entry read
            i, end = blob.count(b"\0", 0, at), blob.find(b"\0", at + 1)
            rel = os.fsdecode(blob[at + len(mark):end if end >= 0 else len(blob)])
            deps[rel] = "xxh3:" + rec.hashes[i * w:(i + 1) * w].decode()
            at = blob.find(mark, at + 1)
        return str(rec.head.get("skey") or ""), deps
    m = manifest_mod.read(Path(entry_path))
    if m is None:
        return None
    return m.skey, {str(d["path"])[len(prefix):]: "xxh3:" + str(d["xxh3"]) for d in m.deps
                    if str(d["path"]).startswith(prefix)}


_NO_BUILD: tuple[Settings, Settings] | None = None  # (settings, the same with no_build): loads share one


def _no_build(s: Settings) -> Settings:
    global _NO_BUILD
    if s.no_build:
        return s
    got = _NO_BUILD  # one read of a tuple: safe under kc.warm's threads
    if got is None or got[0] is not s:
        got = (s, s.replace(no_build=True))
        _NO_BUILD = got
    return got[1]


def served(spec: KernelSpec, s: Settings, pipeline: Callable[[KernelSpec, Settings], tuple[Any, Any]]
           ) -> tuple[Any, Any]:
    """``pipeline`` under locked serving. Fast path: load without building (a miss raises), then
    compare what the loader served (its source key, its verified headers) with the lock: nothing is
    hashed twice. Only when that fails (a miss, or another entry) the full check runs and names
    the drifted input; a kernel the lock still describes then goes through the whole pipeline
    (a compile after ready, counted)."""
    from ..base.errors import CacheMissError

    assert s.lock is not None
    k = lock_of(s.lock).kernels.get(spec.name)
    if k is not None:
        try:
            mod, res = pipeline(spec, _no_build(s))
        except CacheMissError as e:
            _refuse(spec, s, drift(k, spec, s, s.lock))
            if s.no_build:
                raise e
        except LockViolation:
            raise
        except Exception:
            _refuse(spec, s, drift(k, spec, s, s.lock))
            raise
        else:
            if not is_locked_entry(k, spec, s, res.entry_path):
                _refuse(spec, s, drift(k, spec, s, s.lock))
            return mod, res
    else:
        _refuse(spec, s, drift(k, spec, s, s.lock))
    return pipeline(spec, s)


def locked_specs(path: str | os.PathLike[str], s: Settings) -> list[KernelSpec]:
    """The KernelSpecs the lock at ``path`` names, rebuilt on this host from their blocks (a
    shipped kernel from its reference, any other from the spec the block carries)."""
    return [spec for spec, _ in locked_loads(path, s)]


def _strip(label: str) -> str:
    return ",".join(a.rstrip("abcdefghijklmnopqrstuvwxyz") for a in label.split(","))


def foreign_arch(k: KernelLock, spec: KernelSpec, s: Settings) -> str | None:
    """The arch a kind with verbatim flags (FlashInfer, SGLang) must load with here: its gencode
    set is in its flags and its route loads it under the arch its JIT named (``9.0a``), which
    the lock recorded; this host's ``KERNELCACHE_CUDA_ARCH`` (``9.0``) would name no locked
    record. None: load with this host's arch (a kind that adds its own arch flags)."""
    from .. import kinds
    from .record import arch_label

    if not spec.is_cuda or not kinds.of(spec.kind).verbatim_flags:
        return None
    try:
        here = arch_label(spec, s)[1]
    except Exception:  # noqa: BLE001 - no arch here: the recorded one decides
        here = ""
    labels = sorted(a for a in k.archs if a != HOST_ARCH)
    if here in labels:
        return None
    same = [a for a in labels if _strip(a) == _strip(here)]
    pick = same or labels
    return pick[0] if len(pick) == 1 else None


def locked_loads(path: str | os.PathLike[str], s: Settings) -> list[tuple[KernelSpec, Settings]]:
    """Each locked kernel's KernelSpec on this host and the settings it loads with (``s``, or
    ``s`` under the arch a foreign kind was locked for, :func:`foreign_arch`)."""
    from .check import spec_of
    from .paths import Anchors

    lock = lock_of(path)
    a = Anchors(path, s.cache_dir)
    out = []
    for _, k in sorted(lock.kernels.items()):
        spec = spec_of(k, a, s)
        arch = foreign_arch(k, spec, s)
        out.append((spec, s if arch is None else s.replace(cuda_arch=arch)))
    return out


def preload(path: str | os.PathLike[str], settings: Settings | None = None, jobs: int | None = None
            ) -> list["WarmResult"]:
    """Load and validate every kernel of the lock at ``path`` in parallel (``kc.warm``'s pool)
    under locked serving, then mark the process ready: a drift fails here, at startup, with one
    :class:`LockViolation` naming every refused kernel, and compiles from now on are counted as
    compiles after ready (``kc.stats()["compiles_after_ready"]``)."""
    import kernelcache as kc

    s = resolve(settings)
    s = s.replace(lock=Path(os.path.abspath(path)), lock_record=None)
    loads = locked_loads(path, s)
    results: list[Any] = [None] * len(loads)
    groups: dict[str | None, list[int]] = {}
    for i, (_, ss) in enumerate(loads):  # one pool per arch: kc.warm takes one Settings
        groups.setdefault(ss.cuda_arch, []).append(i)
    for idx in groups.values():
        ss = loads[idx[0]][1]
        for i, r in zip(idx, kc.warm([loads[i][0] for i in idx], jobs=jobs, settings=ss)):
            results[i] = r
    refused = [r for r in results if isinstance(r.error, LockViolation)]
    if refused:
        errs: list[Any] = [r.error for r in refused]
        first = errs[0]
        raise LockViolation(first.spec_name, first.drift, str(path),
                            also=[f"{e.spec_name}: {d}" for e in errs[1:] for d in e.drift]) from first
    failed = [r for r in results if r.error is not None]
    if failed:
        raise failed[0].error
    events.mark_ready()
    return results
