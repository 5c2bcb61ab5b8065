"""Commands over the local cache: warm, ls, verify, explain, prune, clean, stats."""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..base.events import Place, Status
from ..base.layout import BUILT, QUARANTINE, Layout
from . import records
from .common import settings_of, table


def arch_problem(s) -> str | None:
    """A target arch that is set but cannot be parsed: a usage error (exit 2), never a skip.

    A typo in CI (``KERNELCACHE_CUDA_ARCH=banana``) must not silently drop the CUDA build."""
    if not (s.cuda_arch or "").strip():
        return None
    from ..host import gpu

    try:
        gpu.parse_arch_list(s.cuda_arch)
    except gpu.ArchError as e:
        from ..base.settings import kc_environ

        where = "KERNELCACHE_CUDA_ARCH" if (kc_environ().get("KERNELCACHE_CUDA_ARCH") or "").strip() \
            else "TVM_FFI_CUDA_ARCH_LIST"
        return f"{where}={s.cuda_arch!r}: {e}"
    return None


def usage_error(message: str) -> int:
    print(f"kernelcache: usage error: {message}", file=sys.stderr)
    return 2


def _cuda_unavailable(spec, s) -> str | None:
    """Why a CUDA kernel cannot be built here (no nvcc / no target arch), or None."""
    if not spec.is_cuda:
        return None
    from ..base.errors import ToolchainError
    from ..host import gpu, toolchain

    try:
        toolchain.find_cuda_home()
        gpu.target_archs(s.cuda_arch)
    except ToolchainError as e:
        return f"{e}"
    return None


def cmd_warm(args) -> int:
    from ..lookup import loader

    s = settings_of(args)
    bad = arch_problem(s)
    if bad:
        return usage_error(bad)
    t_import = time.monotonic()
    try:  # import once up front: per-kernel times then exclude the tvm-ffi (and torch) import
        import tvm_ffi  # noqa: F401
    except ImportError:
        pass
    t_import = time.monotonic() - t_import
    t0 = time.monotonic()
    todo, skipped = [], []
    for spec in records.resolve(args.names, getattr(args, "spec", None) or [], s).values():
        why = _cuda_unavailable(spec, s)
        if why and not args.names and not s.remote_enabled and not s.prebuilt:
            skipped.append(loader.WarmResult(spec.name, Status.SKIPPED, 0.0, why))
        else:
            todo.append(spec)
    results = loader.warm(todo, jobs=args.jobs, settings=s) + skipped
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
    else:
        print(f"kernelcache: cache dir {s.cache_dir} (tvm-ffi import {t_import:.1f}s)")
        rows = [[r.name, r.status, f"{r.seconds:.2f}s", (r.reason or "")[:100]] for r in results]
        print(table(rows, ["kernel", "status", "time", "reason"]))
        counts = {k: sum(r.status == k for r in results) for k in Status}
        print(", ".join(f"{v} {k}" for k, v in counts.items() if v or k in (Status.HIT, Status.BUILT, Status.FAILED))
              + f" in {time.monotonic() - t0:.1f}s")
        for r in results:
            if r.status == Status.FAILED:
                print(f"\n--- {r.name} failed ---\n{r.reason}", file=sys.stderr)
    return 1 if any(r.status == Status.FAILED for r in results) else 0


def _all_entries(s, name):
    """(entry, where) for the cache and every prebuilt root."""
    from ..storage import prebuilt
    from ..storage.local import LocalStore

    out = [(e, "cache" if e.origin is Place.LOCAL else "fetched") for e in LocalStore(s).entries(name)]
    names = [name] if name else sorted({e.manifest.name for e, _ in out} | _prebuilt_names(s))
    for n in names:
        out += [(e, f"prebuilt:{e.path.parents[3]}") for e in prebuilt.candidates(n, s)]
    return out


def _prebuilt_names(s) -> set[str]:
    from ..storage import prebuilt

    names: set[str] = set()
    for root in prebuilt.roots(s):
        try:
            names |= {p.name for p in Layout(root).area(BUILT).iterdir() if p.is_dir()}
        except OSError:
            continue
    return names


def _kind_of(entry_dir: Path) -> str:
    """The kind an entry's manifest names, from the small head of its hit record (a torch
    manifest is ~900 KB of dependencies); the manifest itself only when the record is not bound."""
    from ..base.spec import DEFAULT_KIND
    from ..entry import deprecord
    from ..entry.manifest import FILENAME, read

    head = deprecord.head(entry_dir, FILENAME)
    if head is None:
        m = read(entry_dir)
        return m.kind if m is not None else "?"
    return str(head.get("kind") or DEFAULT_KIND)  # tvm-ffi manifests leave the default out


def _kind_label(kind: str) -> str:
    """How ``ls`` and ``stats`` name a kind ("torch extension", "FlashInfer JIT module", ...)."""
    from .. import kinds
    from ..base.errors import SpecError

    try:
        return kinds.of(kind).label or kind
    except SpecError:  # a kind of a package not installed here
        return kind


def cmd_ls(args) -> int:
    """From paths and stats, and each entry's kind from the small head of its hit record:
    10,000 entries list in well under two seconds."""
    from ..storage import prebuilt
    from ..storage.entry import dir_size
    from ..storage.local import LocalStore

    s = settings_of(args)
    items: list[dict[str, Any]] = [{"name": i.name, "entry_id": i.entry_id, "path": str(i.path),
              "source": "cache" if i.area == BUILT else "fetched", "key": i.key, "size": i.size,
              "last_used": i.last_used, "kind": _kind_of(i.path)} for i in LocalStore(s).infos(args.name)]
    for n in ([args.name] if args.name else sorted(_prebuilt_names(s))):
        items += [{"name": n, "entry_id": e.entry_id, "path": str(e.path), "source": f"prebuilt:{e.path.parents[3]}",
                   "key": e.manifest.key1[:32], "size": dir_size(e.path), "last_used": e.last_used(),
                   "kind": e.manifest.kind}
                  for e in prebuilt.candidates(n, s)]
    labels = {k: _kind_label(k) for k in {i["kind"] for i in items}}
    for i in items:
        i["kind_label"] = labels[i["kind"]]
    if args.json:
        print(json.dumps(items, indent=1))
        return 0
    print(f"cache dir: {s.cache_dir}")
    rows = [[i["name"], i["entry_id"][:12], i["source"], f"{i['size'] / 1e6:.1f}MB",
             time.strftime("%Y-%m-%d %H:%M", time.localtime(i["last_used"])), i["kind_label"]]
            for i in sorted(items, key=lambda i: (i["name"], -i["last_used"]))]
    print(table(rows, ["kernel", "entry", "from", "size", "last used", "kind"]) if rows else "(empty)")
    return 0


def cmd_verify(args) -> int:
    """Re-hash every entry's .so against its manifest; quarantine the bad ones with --fix."""
    from ..entry.validate import binary_problem
    from ..storage.local import LocalStore

    s = settings_of(args)
    bad = 0
    rows = []
    for e, src in _all_entries(s, args.name):
        m = e.manifest
        problem = binary_problem(e.so_path, list(m.schemas), m.so_size, m.so_sha256)
        rows.append([m.name, e.entry_id[:12], src, "ok" if problem is None else "BAD: " + problem])
        if problem:
            bad += 1
            if args.fix and not e.read_only:
                LocalStore(s).quarantine(e, f"verify: {problem}")
    print(f"cache dir: {s.cache_dir}")
    print(table(rows, ["kernel", "entry", "from", "state"]) if rows else "(empty)")
    print(f"{bad} bad entr{'y' if bad == 1 else 'ies'}")
    return 1 if bad else 0


def cmd_explain(args) -> int:
    from ..base.errors import UnknownKernel
    from ..lookup.diagnose import explain

    s = settings_of(args)
    bad = arch_problem(s)
    if bad:
        return usage_error(bad)
    try:
        spec = records.resolve([args.name], getattr(args, "spec", None) or [], s, fetched=False)[args.name]
        info = explain(spec, s)
    except (records.NoSourcesHere, UnknownKernel) as e:  # built elsewhere only (fetched, or a prebuilt root)
        from ..lookup.diagnose import explain_recorded

        info = explain_recorded(args.name, s)
        if isinstance(e, UnknownKernel) and not info["prebuilt"]:
            raise
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    print(f"kernel:  {info['name']}\nkey:     {info['key1']}\nstatus:  {info['status']}")
    kind = info.get("kind") or (info["inputs"] or {}).get("kind")
    if kind:
        from .. import kinds

        print(f"kind:    {kind}" + (f" ({kinds.of(kind).label})" if kinds.label(kind) != kind else ""))
    if info.get("root"):
        print(f"root:    {info['root']}")
    if info["entry"]:
        print(f"entry:   {info['entry']}{_deps_recorded(info['entry'])}")
    if info["reason"]:
        print(f"why miss: {info['reason']}")
    if info.get("note"):
        print(f"note:    {info['note']}")
    for r in info["refused"]:
        print(f"refused: {r}")
    inp = info["inputs"]
    if inp:
        print("inputs:")
        print(f"  sources: {', '.join(inp.get('sources') or ())}")
        for flag, values in (info.get("flags") or {}).items():
            if values:
                print(f"  {flag}: {' '.join(values)}")
        for t, v in (inp.get("tools") or {}).items():
            print(f"  {t}: {v['path']} ({_release(v.get('version') or '')})")
        print(f"  arch: {inp.get('arch') or 'n/a (cpu)'}\n  abi: {inp.get('abi')}\n  env: {inp.get('env') or '{}'}")
        if inp.get("extra_abi"):
            print(f"  extra_abi: {inp['extra_abi']}")
        nat = inp.get("native")
        if nat:
            march = next((t for t in nat["expanded"] if t.startswith(("-march=", "-mcpu="))), "?")
            print(f"  native: {' '.join(nat['flags'])} -> {march} (+{len(nat['expanded']) - 1} target flags); "
                  f"needs CPU features: {', '.join(nat['cpu_features']) or 'none'}")
    return 0


def _release(version: str) -> str:
    """The line of a tool's ``--version`` that names its release (nvcc's is the last, after a
    banner and a copyright; a compiler's the first)."""
    lines = [ln.strip() for ln in version.splitlines() if ln.strip()]
    return next((ln for ln in lines if "release" in ln), lines[0] if lines else "?")


def _deps_recorded(entry: str) -> str:
    """`` (N dependencies recorded)`` from the entry's manifest ("" when it cannot be read)."""
    from pathlib import Path

    from ..entry.manifest import read

    m = read(Path(entry))
    return f" ({len(m.deps)} dependencies recorded)" if m is not None else ""


def cmd_prune(args) -> int:
    from ..base.errors import RemovalError
    from ..storage.local import LocalStore

    if args.max_size is None and args.max_age is None:
        print("prune: give --max-size and/or --max-age", file=sys.stderr)
        return 2
    failed: list = []
    try:
        evicted = LocalStore(settings_of(args)).prune(args.max_size, args.max_age)
    except RemovalError as e:  # what was removed is reported as such; what was not, as an error
        evicted, failed = e.done, e.failed
    for i in evicted:
        print(f"evicted {i.name} {i.entry_id[:12]}" + (" (quarantine)" if i.area == QUARANTINE else ""))
    print(f"{len(evicted)} entr{'y' if len(evicted) == 1 else 'ies'} evicted"
          + (f", {len(failed)} path(s) could not be removed" if failed else ""))
    return _removal_failed("prune", failed)


def cmd_clean(args) -> int:
    from ..base.errors import RemovalError
    from ..storage.local import LocalStore

    s = settings_of(args)
    if not args.yes and sys.stdin is not None and sys.stdin.isatty():
        if input(f"remove everything under {s.layout_root}? [y/N] ").strip().lower() != "y":
            return 1
    try:
        existed = LocalStore(s).clean()
    except RemovalError as e:
        return _removal_failed("clean", e.failed)
    print(f"removed {s.layout_root}" if existed else f"nothing to remove: {s.layout_root} does not exist")
    return 0


def _removal_failed(what: str, failed: list) -> int:
    """Each path that could not be removed, on stderr; the exit status (1 if any)."""
    for path, err in failed:
        print(f"kernelcache: {what}: cannot remove {path}: {err.strerror or err}", file=sys.stderr)
    return 1 if failed else 0


def cmd_stats(args) -> int:
    """Per kernel: entries, size, builds recorded, last used — every kernel the cache has seen,
    shipped or not (drop-in ``load_inline`` kernels included)."""
    from ..storage.local import LocalStore

    s = settings_of(args)
    rows: dict[str, dict] = defaultdict(lambda: {"entries": 0, "fetched": 0, "size": 0, "last_used": 0.0,
                                                 "kinds": set()})
    for i in LocalStore(s).infos(args.name):
        r = rows[i.name]
        r["entries" if i.area == BUILT else "fetched"] += 1
        r["size"] += i.size
        r["last_used"] = max(r["last_used"], i.last_used)
        r["kinds"].add(_kind_of(i.path))
    for r in rows.values():  # one kind, as a string; a name cached as two kinds lists both
        kinds = sorted(r.pop("kinds"))
        r["kind"], r["kind_label"] = ", ".join(kinds), ", ".join(map(_kind_label, kinds))
    if args.json:
        print(json.dumps(dict(rows), indent=1))
        return 0
    print(f"cache dir: {s.cache_dir}")
    out = [[n, r["entries"], r["fetched"], f"{r['size'] / 1e6:.1f}MB",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["last_used"])), r["kind_label"]]
           for n, r in sorted(rows.items())]
    print(table(out, ["kernel", "built", "fetched", "size", "last used", "kind"]) if out else "(empty)")
    return 0
