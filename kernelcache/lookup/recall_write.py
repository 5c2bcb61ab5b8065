"""What a recalled call must re-check: gathered after a full load accepted an entry.

The full path (``kernelcache.lookup.loader``) decided which entry answers a call from the call's inputs
and the state of a set of files. ``remember`` writes that set, each file with the stat the full
path verified, so that ``kernelcache.lookup.recall`` can answer the same call in a later process by
re-stating them. It records nothing it did not verify: a file whose stat moved since the hit
record's check, a source whose bytes are not the key's, or a tool that is not the key's makes it
record nothing (that process's next call takes the full path again). Calls whose answer depends on
something a stat cannot witness are never recorded: an arch taken from the visible GPUs,
``-march=native``, entries from prebuilt roots or the fleet (checked against the installation,
not by stats), settings given as an object rather than by the environment.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import sys
from pathlib import Path

from .. import kinds
from ..base.events import Status
from ..base.formats import RECALL_FORMAT
from ..base.layout import BUILT, Layout
from ..base.memo import memo_path
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry import deprecord
from ..entry.manifest import FILENAME as MANIFEST
from ..host import toolchain
from ..host.anchors import anchors_for
from ..base.stamps import import_stamp
from ..storage import prebuilt


class _Witnesses:
    """Paths with the stat each must still have, and paths that must stay absent."""

    def __init__(self) -> None:
        self.paths: list[bytes] = []
        self.stats: list[int] = []
        self.absent: list[bytes] = []

    def add(self, path: str | bytes | os.PathLike[str], expected: list[int] | tuple[int, ...] | None = None) -> bool:
        """Record ``path`` at its current stat; with ``expected``, only if that is still it."""
        try:
            st = deprecord.stat_fields(os.stat(path))
        except OSError:
            return False
        if expected is not None and list(expected) != st:
            return False
        self.paths.append(os.fsencode(path))
        self.stats.extend(st)
        return True

    def must_stay_absent(self, path: str | bytes | os.PathLike[str]) -> bool:
        if os.path.exists(path):
            return False
        self.absent.append(os.fsencode(path))
        return True

    def on_path(self, name: str, found: str) -> bool:
        """A tool ``name`` found at ``found``: that file, and (a bare name, looked up on PATH) no
        same-named file earlier on PATH."""
        if os.path.dirname(name):
            return self.add(found)
        for d in (os.environ.get("PATH") or "").split(os.pathsep):
            cand = os.path.join(d or ".", name)
            if os.path.abspath(cand) == os.path.abspath(found):
                return self.add(found)
            if not self.must_stay_absent(cand):
                return False
        return self.add(found)


def remember(digest: str | None, spec: KernelSpec, settings: Settings, status: Status, entry_path: str,
             note: str | None = None) -> bool:
    """Record the answer of the call with ``digest`` (best effort). Returns whether it did.
    ``note``: handed back with a recalled module (``recall.recall_entry``)."""
    how = kinds.of(spec.kind).recall_load
    if digest is None or how is None or status not in (Status.HIT, Status.BUILT):
        return False
    if settings.rebuild or settings.verify_installed or (spec.is_cuda and not settings.cuda_arch):
        return False
    if any("native" in f for f in (*spec.cflags, *spec.cuda_cflags)):
        return False
    if settings.lock is not None and settings.lock_mode != "error":  # warn: each load says its drift
        return False
    built = str(Layout(settings.cache_dir).area(BUILT))
    if not entry_path.startswith(built + os.sep):  # fetched from the fleet: checked against the installation
        return False
    try:
        w = _witnesses(spec, settings, Path(entry_path))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if w is None:
        return False
    if settings.lock is not None:  # served under a kernel lock: the lock this load was checked against
        from ..lockfile.serve import checked_stat

        seen = checked_stat(settings.lock)
        if seen is None or not w[0].add(settings.lock, seen):
            return False
    head = w[1]
    rec = (RECALL_FORMAT, spec.name, head.entry_id, entry_path, str(Path(entry_path) / head.so_name), how,
           b"\0".join(w[0].paths), _packed(w[0].stats), b"\0".join(w[0].absent), import_stamp(), note,
           str(spec.root), spec.kind)
    _publish(memo_path(digest, str(settings.cache_dir)), rec)
    return True


def _packed(stats: list[int]) -> bytes:
    from array import array

    return array("q", stats).tobytes()


def _witnesses(spec: KernelSpec, settings: Settings, edir: Path):
    rec = deprecord.load(edir, MANIFEST)
    if rec is None:
        return None
    from ..entry.manifest import Manifest

    head = Manifest.from_dict(rec.head)
    if head is None:
        return None
    w = _Witnesses()
    so = edir / head.so_name
    if not (w.add(so) and w.add(edir / MANIFEST) and w.add(edir / deprecord.FILENAME)):
        return None
    plan = kinds.make_plan(spec, settings)
    anchors = anchors_for(plan)
    # every dependency the hit record checks, at the stat it verified
    checked = deprecord.resolved(rec.dep_paths, anchors)
    for i, p in enumerate(checked):
        if not w.add(p, rec.stats[i * 4:(i + 1) * 4].tolist()):
            return None
    seen = set()  # groups share their root (a site directory, dpkg's status): stat-ed once
    for record, stat, _label, _count, root, root_stat in rec.groups:  # trusted packages
        for anchored, expected in ((record, stat), (root, root_stat)):
            if anchored in seen:
                continue
            seen.add(anchored)
            group_path = deprecord.resolved(b"\0" + os.fsencode(anchored), anchors)[0]
            if not w.add(group_path, expected):
                return None
    for p in deprecord.resolved(rec.absent_blob, anchors):
        if not w.must_stay_absent(p):
            return None
    # the sources, by the key's bytes (stat, hash, stat: a source written meanwhile is not recorded)
    hashes = head.inputs.get("sources") or {}
    for rel, path in zip(spec.sources, spec.source_paths()):
        before = deprecord.stat_fields(os.stat(path))
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != hashes.get(rel):
                return None
        if not w.add(path, before):
            return None
    # the tools the key names, found where the full path would find them
    tools = head.inputs.get("tools") or {}
    for label, fact in plan.tools.items():
        if tools.get(label, {}).get("mtime_ns") != fact["mtime_ns"] or not w.add(fact["path"]):
            return None
    for name in (os.environ.get("CXX") or "c++", os.environ.get("CC") or "cc", "g++"):
        found = shutil.which(name)
        if found and not w.on_path(name, found):
            return None
    tvm = toolchain.tvm_ffi_paths(settings.memo_dir)
    if not (w.add(tvm.lib_path) and w.add(tvm.package_dir) and w.add(os.path.dirname(tvm.package_dir))):
        return None
    # KERNELCACHE_STRICT_DIRS: the cache dir was checked; a chmod or chown moves its ctime (decided again).
    # The memo's own directory first, so that publishing this memo does not move the root's.
    if settings.strict_dirs:
        os.makedirs(settings.layout.recall, exist_ok=True)
        if not all(w.add(str(d)) for d in (settings.layout.base, settings.layout.root)):
            return None
    # no prebuilt root answers first (their discovery is witnessed by the distributions stamp)
    for root in prebuilt.roots(settings):
        kdir = Layout(root).kernel_dir(spec.name)
        if os.path.exists(kdir):
            if not w.add(kdir):
                return None
        elif not w.must_stay_absent(kdir):
            return None
    for own in own_files():
        if not w.add(own):
            return None
    return w, head


def own_files() -> list[str]:
    """What stands for kernelcache's own rules (keys, kinds, records, this very recall): a changed
    installation of kernelcache must not answer with what an older rule decided.

    An installed (non-editable) kernelcache: its ``RECORD`` (an upgrade or reinstall writes a new
    one). Otherwise (an editable install, a checkout on the import path): every kernelcache module
    this process imported — the full load that decided the answer ran exactly those, wherever a
    rule lives (``kinds/`` included), so no hand-kept list of rule files can miss one."""
    top = sys.modules[__name__.partition(".")[0]]  # the kernelcache package, wherever this module sits in it
    pkg = os.path.dirname(os.path.abspath(top.__file__ or ""))
    site = os.path.dirname(pkg)
    try:
        infos = [n for n in os.listdir(site) if n.startswith("kernelcache-") and n.endswith(".dist-info")]
    except OSError:
        infos = []
    for info in infos:
        record = os.path.join(site, info, "RECORD")
        try:
            with open(record, "rb") as f:
                if b"kernelcache/__init__.py," in f.read():  # this very installation, not an editable stub
                    return [record]
        except OSError:
            continue
    prefix = top.__name__ + "."
    out = []
    for name, mod in list(sys.modules.items()):
        if name == top.__name__ or name.startswith(prefix):
            path = getattr(mod, "__file__", None)
            if path and os.path.abspath(path).startswith(pkg + os.sep):
                out.append(os.path.abspath(path))
    return sorted(out)


def _publish(path: str, rec: tuple) -> None:
    """Publish a memo atomically (best effort: a memo that cannot be written only costs speed).
    Here, not in ``recall``: a recalled call never writes, and every function of that module
    is allocated in each process that recalls."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(3).hex()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(rec, 2))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
