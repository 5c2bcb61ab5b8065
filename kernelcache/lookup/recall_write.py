"""What a recalled call must re-check: the list a full load's answer rested on, written down.

The full path (``kernelcache.lookup.loader``) decides which entry answers a call, and every check
on its way notes what it verified (``kernelcache.base.basis``): the sources at the stat they were
hashed under, each dependency at the stat the hit record's check compared, the binary at the
stat its bytes were verified at, the compilers and what ``PATH`` held before them, tvm-ffi's
files, the prebuilt roots' directories, the kernel lock. ``remember`` writes that list as the
load returned it (nothing is gathered again here), plus kernelcache's own files (the rules
that made the answer), so that ``kernelcache.lookup.recall`` can answer the same call in a later
process by re-stating them. A check that could not witness its fact by a stat spoils the list,
and such an answer is never recorded; so are answers from prebuilt roots or the fleet (checked
against the installation, not by stats), an arch taken from the visible GPUs and ``-march=native``.
"""
from __future__ import annotations

import marshal
import os
import sys
from typing import TYPE_CHECKING

from .. import kinds
from ..base.events import Status
from ..base.layout import BUILT, Layout
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..base.warm_facts import RECALL_FORMAT, import_stamp, memo_path, stat_fields

if TYPE_CHECKING:
    from ..base.result import WarmResult


def remember(digest: str | None, spec: KernelSpec, settings: Settings, res: WarmResult,
             note: str | None = None) -> bool:
    """Record the answer ``res`` of the call with ``digest`` (best effort). Returns whether it did.
    ``note``: handed back with a recalled module (``recall.recall_entry``)."""
    how = kinds.of(spec.kind).recall_load
    rested = res.rested_on
    if digest is None or how is None or rested is None or rested.spoiled is not None:
        return False
    if res.status not in (Status.HIT, Status.BUILT):
        return False
    if settings.rebuild or settings.verify_installed or (spec.is_cuda and not settings.cuda_arch):
        return False
    if any("native" in f for f in (*spec.cflags, *spec.cuda_cflags)):
        return False
    if settings.lock is not None and (settings.lock_mode != "error"  # warn: each load says its drift
                                      or os.fsencode(os.path.abspath(settings.lock)) not in rested.stats):
        return False
    built = str(Layout(settings.cache_dir).area(BUILT))
    if not res.entry_path.startswith(built + os.sep):  # fetched from the fleet: checked against the installation
        return False
    stats = dict(rested.stats)
    for own in own_files():  # kernelcache's own rules: not a fact of this load, the code that made it
        try:
            stats[os.fsencode(own)] = stat_fields(os.stat(own))
        except OSError:
            return False
    rec = (RECALL_FORMAT, spec.name, res.entry_id, res.entry_path, res.so_path, how,
           b"\0".join(stats), _packed([x for st in stats.values() for x in st]), b"\0".join(rested.absent),
           import_stamp(), note, str(spec.root), spec.kind)
    _publish(memo_path(digest, str(settings.cache_dir)), rec)
    return True


def _packed(stats: list[int]) -> bytes:
    from array import array

    return array("q", stats).tobytes()


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
