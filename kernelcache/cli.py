"""`kernelcache warm | ls | verify | explain | prune | clean | doctor | build | pack`.

The CLI is a thin shell over the public API: every command works on the shipped kernels by
name (``kernelcache.kernels``) and on the cache root from KERNELCACHE_DIR.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path


def _specs(names: list[str]):
    from .kernels import shipped_specs

    return shipped_specs(names or None)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(lines)


def _cuda_unavailable(spec) -> str | None:
    """Why a CUDA kernel cannot be built here (no nvcc / no target arch), or None."""
    if not spec.is_cuda:
        return None
    from . import toolchain
    from .errors import ToolchainError

    try:
        toolchain.find_cuda_home()
        toolchain.cuda_archs()
    except ToolchainError as e:
        return f"{e}"
    return None


def cmd_warm(args) -> int:
    from . import loader
    from .config import cache_dir

    t_import = time.monotonic()
    try:  # import once up front: per-kernel times then exclude the tvm-ffi (and torch) import
        import tvm_ffi  # noqa: F401
    except ImportError:
        pass
    t_import = time.monotonic() - t_import
    t0 = time.monotonic()
    specs, skipped = [], []
    for spec in _specs(args.names).values():
        why = _cuda_unavailable(spec)
        if why and not args.names:
            skipped.append(loader.WarmResult(spec.name, "skipped", 0.0, why))
        else:
            specs.append(spec)
    results = loader.warm(specs, jobs=args.jobs) + skipped
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
    else:
        print(f"kernelcache: cache dir {cache_dir()} (tvm-ffi import {t_import:.1f}s)")
        rows = [[r.name, r.status, f"{r.seconds:.2f}s", (r.reason or "")[:100]] for r in results]
        print(_table(rows, ["kernel", "status", "time", "reason"]))
        print(f"{sum(r.status == 'hit' for r in results)} hit, {sum(r.status == 'built' for r in results)} built, "
              f"{sum(r.status == 'prebuilt' for r in results)} prebuilt, "
              f"{sum(r.status == 'failed' for r in results)} failed, "
              f"{sum(r.status == 'skipped' for r in results)} skipped in {time.monotonic() - t0:.1f}s")
        for r in results:
            if r.status == "failed":
                print(f"\n--- {r.name} failed ---\n{r.reason}", file=sys.stderr)
    return 1 if any(r.status == "failed" for r in results) else 0


def _entries(args):
    from . import store

    out = [(e, "cache") for e in store.all_entries(name=getattr(args, "name", None))]
    try:
        from .prebuilt import prebuilt_roots

        for root in prebuilt_roots():
            out += [(e, f"prebuilt:{root}") for e in store.all_entries(root, name=getattr(args, "name", None), prebuilt=True)]
    except ImportError:
        pass
    return out


def cmd_ls(args) -> int:
    from .config import cache_dir

    items = _entries(args)
    if args.json:
        print(json.dumps([{
            "name": e.manifest.get("name"), "entry_id": e.entry_id, "path": str(e.path), "source": src,
            "size": e.size_bytes(), "last_used": e.last_used(), "created": e.manifest.get("created"),
            "arch": e.manifest.get("inputs", {}).get("arch"), "build_seconds": e.manifest.get("build_seconds"),
        } for e, src in items], indent=1))
        return 0
    print(f"cache dir: {cache_dir()}")
    rows = []
    for e, src in sorted(items, key=lambda x: (x[0].manifest.get("name", ""), -x[0].last_used())):
        rows.append([e.manifest.get("name"), e.entry_id[:12], src, f"{e.size_bytes() / 1e6:.1f}MB",
                     ",".join(e.manifest.get("inputs", {}).get("arch") or []) or "cpu",
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used()))])
    print(_table(rows, ["kernel", "entry", "from", "size", "arch", "last used"]) if rows else "(empty)")
    return 0


def cmd_verify(args) -> int:
    """Re-hash every entry's .so against its manifest; quarantine the bad ones with --fix."""
    from . import store
    from .schema import binary_problem
    from .toolchain import sha256_file

    bad = 0
    for e, src in _entries(args):
        problem = binary_problem(e.so_path, list(e.manifest.get("schemas", {})), e.manifest.get("so_size"))
        if problem is None and sha256_file(e.so_path) != e.manifest.get("so_sha256"):
            problem = "sha256 mismatch"
        status = "ok" if problem is None else f"BAD: {problem}"
        print(f"{e.manifest.get('name')}  {e.entry_id[:12]}  {src}  {status}")
        if problem:
            bad += 1
            if args.fix and src == "cache":
                store.quarantine(e, f"verify: {problem}")
    print(f"{bad} bad entr{'y' if bad == 1 else 'ies'}")
    return 1 if bad else 0


def cmd_explain(args) -> int:
    from .loader import explain

    info = explain(_specs([args.name])[args.name])
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    print(f"kernel:  {info['name']}\nkey:     {info['key1']}\nstatus:  {info['status']}")
    if info["entry"]:
        print(f"entry:   {info['entry']}")
    if info["reason"]:
        print(f"why miss: {info['reason']}")
    for r in info["refused"]:
        print(f"refused: {r}")
    inp = info["inputs"]
    print("inputs:")
    print(f"  sources: {', '.join(inp['sources'])}")
    for t, v in inp["tools"].items():
        print(f"  {t}: {v['path']} ({(v['version'] or '').splitlines()[0] if v['version'] else '?'})")
    print(f"  arch: {inp['arch'] or 'n/a (cpu)'}\n  abi: {inp['abi']}\n  env: {inp['env'] or '{}'}")
    return 0


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.I)


def parse_size(s: str) -> int:
    m = _SIZE.match(s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 500M, 10G)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower()))


def parse_age(s: str) -> float:
    m = _AGE.match(s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad age {s!r} (e.g. 12h, 30d)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[(m.group(2) or "").lower()]


def cmd_prune(args) -> int:
    from . import store

    if args.max_size is None and args.max_age is None:
        print("prune: give --max-size and/or --max-age", file=sys.stderr)
        return 2
    evicted = store.prune(args.max_size, args.max_age)
    for e in evicted:
        print(f"evicted {e.manifest.get('name')} {e.entry_id[:12]}")
    print(f"{len(evicted)} entr{'y' if len(evicted) == 1 else 'ies'} evicted")
    return 0


def cmd_clean(args) -> int:
    from . import store
    from .config import cache_dir

    if not args.yes and sys.stdin is not None and sys.stdin.isatty():
        if input(f"remove everything under {cache_dir()}? [y/N] ").strip().lower() != "y":
            return 1
    store.clean()
    print(f"removed {cache_dir()}/{store.LAYOUT}")
    return 0


def cmd_doctor(args) -> int:
    """Report every tool and header set; exit 1 only if something the CPU path needs is missing."""
    from . import config, toolchain

    ok = True

    def line(label: str, fn, required: bool = True):
        nonlocal ok
        try:
            print(f"{label:<18} {fn()}")
        except Exception as e:  # noqa: BLE001 - doctor reports every problem, never stops
            ok = ok and not required
            print(f"{label:<18} {'MISSING' if required else 'not available'}: {e}")

    print(f"{'python':<18} {sys.version.split()[0]} ({sys.executable})")
    line("cache dir", lambda: f"{config.cache_dir()} (writable: {os.access(config.cache_dir().parent, os.W_OK)})")
    line("lock dir", config.lock_dir)
    line("c++", lambda: f"{toolchain.find_cxx()}: {toolchain.tool_identity(toolchain.find_cxx())['version'].splitlines()[0]}")
    line("ninja", toolchain.find_ninja)
    line("apache-tvm-ffi", lambda: f"{toolchain.tvm_ffi_paths().version} at {toolchain.tvm_ffi_paths().package_dir}")
    line("cuda home", toolchain.find_cuda_home, required=False)
    line("nvcc", lambda: toolchain.tool_identity(toolchain.find_nvcc())["version"].splitlines()[-1], required=False)
    line("gpus (arch)", lambda: ", ".join(toolchain.detect_gpu_archs()) or "none visible", required=False)
    line("target arch", lambda: ", ".join(toolchain.cuda_archs()), required=False)
    try:
        from .kernels import speculative_sampling as ss

        line("flashinfer hdrs", ss.flashinfer_include_dir, required=False)
        line("curand hdrs", lambda: ", ".join(ss.curand_include_dirs()) or "the CUDA toolkit's", required=False)
    except ImportError:
        pass
    try:
        from .prebuilt import prebuilt_roots

        line("prebuilt roots", lambda: ", ".join(map(str, prebuilt_roots())) or "none", required=False)
    except ImportError:
        pass
    return 0 if ok else 1


def cmd_build(args) -> int:
    from .prebuilt import build_artifact_root

    report = build_artifact_root(args.names or None, [a for a in args.arch], Path(args.out))
    for r in report:
        print(f"{r['name']:<28} {r['status']:<8} {r.get('arch') or 'cpu':<6} {r.get('seconds', 0):.1f}s {r.get('reason', '')}")
    return 1 if any(r["status"] == "failed" for r in report) else 0


def cmd_pack(args) -> int:
    from .pack import pack_wheel

    whl = pack_wheel(Path(args.root), Path(args.out), args.tag, args.version)
    print(whl)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelcache", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="build/load the shipped kernels into the cache and print a report")
    w.add_argument("names", nargs="*", help="kernel names (default: all shipped)")
    w.add_argument("-j", "--jobs", type=int, default=None)
    w.add_argument("--json", action="store_true")
    w.set_defaults(fn=cmd_warm)
    ls = sub.add_parser("ls", help="list cache entries (and prebuilt roots)")
    ls.add_argument("name", nargs="?")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_ls)
    v = sub.add_parser("verify", help="re-hash every cached .so against its manifest")
    v.add_argument("name", nargs="?")
    v.add_argument("--fix", action="store_true", help="quarantine bad entries")
    v.set_defaults(fn=cmd_verify)
    e = sub.add_parser("explain", help="what a kernel's key is made of and why it would miss")
    e.add_argument("name")
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=cmd_explain)
    pr = sub.add_parser("prune", help="evict least-recently-used entries by size and/or age")
    pr.add_argument("--max-size", type=parse_size, default=None, help="e.g. 2G")
    pr.add_argument("--max-age", type=parse_age, default=None, help="e.g. 30d")
    pr.set_defaults(fn=cmd_prune)
    c = sub.add_parser("clean", help="remove the whole cache")
    c.add_argument("-y", "--yes", action="store_true")
    c.set_defaults(fn=cmd_clean)
    d = sub.add_parser("doctor", help="toolchain report")
    d.set_defaults(fn=cmd_doctor)
    b = sub.add_parser("build", help="build shipped kernels into a relocatable prebuilt artifact root")
    b.add_argument("names", nargs="*")
    b.add_argument("--arch", action="append", default=[], help="CUDA arch (repeatable), e.g. 9.0")
    b.add_argument("--out", required=True)
    b.set_defaults(fn=cmd_build)
    pk = sub.add_parser("pack", help="pack an artifact root into a companion wheel")
    pk.add_argument("root")
    pk.add_argument("--tag", required=True, help="wheel name suffix, e.g. sm90")
    pk.add_argument("--out", default="dist")
    pk.add_argument("--version", default="0.1.0")
    pk.set_defaults(fn=cmd_pack)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .errors import KernelCacheError

    try:
        return int(args.fn(args) or 0)
    except KeyError as e:
        print(f"kernelcache: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    except KernelCacheError as e:
        print(f"kernelcache: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
