"""Commands about the machine and artifacts: doctor, build (artifact roots), pack (wheels)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..base.events import Status
from . import records
from .common import settings_of


def cmd_doctor(args) -> int:
    """Report every tool and header set; exit 1 if something the CPU path needs is missing or a
    configured fleet cache cannot be reached (usable as a CI pre-check)."""
    from ..host import gpu, toolchain

    s = settings_of(args)
    ok = True

    def line(label: str, fn, required: bool = True, only_for: str = ""):
        nonlocal ok
        try:
            print(f"{label:<18} {fn()}")
        except Exception as e:  # noqa: BLE001 - doctor reports every problem, never stops
            ok = ok and not required
            if only_for:  # a fact one optional kernel needs: not a warning for everyone else
                print(f"{label:<18} not found (needed only by {only_for}): {e}")
            else:
                print(f"{label:<18} {'MISSING' if required else 'not available'}: {e}")

    print(f"{'python':<18} {sys.version.split()[0]} ({sys.executable})")
    line("cache dir", lambda: f"{s.cache_dir} (writable: {os.access(s.cache_dir.parent, os.W_OK)})")
    line("lock dir", lambda: s.lock_dir)
    line("c++", lambda: f"{toolchain.find_cxx()}: {toolchain.tool_identity(toolchain.find_cxx())['version'].splitlines()[0]}")
    line("ninja", toolchain.find_ninja)
    line("apache-tvm-ffi", lambda: f"{toolchain.tvm_ffi_paths().version} at {toolchain.tvm_ffi_paths().package_dir}")
    line("cuda home", toolchain.find_cuda_home, required=False)
    line("nvcc", lambda: toolchain.tool_identity(toolchain.find_nvcc())["version"].splitlines()[-1], required=False)
    line("gpus (arch)", lambda: ", ".join(gpu.visible_archs()) or "none visible", required=False)
    line("target arch", lambda: ", ".join(gpu.target_archs(s.cuda_arch)), required=False)
    try:
        from ..kernels import speculative_sampling as ss

        shipped = "the shipped tree_speculative_sampling kernel"
        line("flashinfer hdrs", lambda: ss.flashinfer_include_dir(s), required=False, only_for=shipped)
        line("curand hdrs", lambda: ", ".join(ss.curand_include_dirs()) or "the CUDA toolkit's", required=False,
             only_for=shipped)
    except ImportError:
        pass
    line("flashinfer route", _flashinfer_route, required=False)
    from ..storage import prebuilt

    line("prebuilt roots", lambda: ", ".join(map(str, prebuilt.roots(s))) or "none", required=False)
    remote_ok, text = _remote_line(s)
    print(f"{'fleet cache':<18} {text}")
    return 0 if ok and remote_ok else 1


def _flashinfer_route() -> str:
    """Whether KERNELCACHE_PATCH=flashinfer would take this FlashInfer's modules, and why not
    (read from its version, without importing flashinfer and its CUDA stack)."""
    from importlib.metadata import PackageNotFoundError, version

    from ..flashinfer import TESTED_VERSIONS

    try:
        found = version("flashinfer-python")
    except PackageNotFoundError:
        return "FlashInfer not installed"
    if found not in TESTED_VERSIONS:
        return (f"off: FlashInfer {found} is not a version the route was tested with "
                f"({', '.join(TESTED_VERSIONS)}); FlashInfer's own JIT builds its modules")
    return f"available for FlashInfer {found} (KERNELCACHE_PATCH=flashinfer)"


def _remote_line(s) -> tuple[bool, str]:
    """A configured remote must answer (doctor is a CI pre-check): (reachable, the line's text)."""
    if not s.remote_enabled:
        return True, "off (set KERNELCACHE_REMOTE to share built kernels across hosts)"
    from ..base.errors import KernelCacheError
    from ..storage.remote import open_remote
    from ..storage.remote.ops import remote_ping

    try:
        rc = open_remote(s, on_down=lambda url, reason: None)  # this line is the one report
    except KernelCacheError as e:
        return False, f"UNUSABLE: {e}"
    ok, message = remote_ping(rc)
    return ok, message if ok else f"UNREACHABLE: {message}"


def cmd_build(args) -> int:
    from ..base.errors import UnknownKernel
    from ..export.roots import build_artifact_root, export_flashinfer, export_sglang
    from ..host import gpu
    from .cache import arch_problem, usage_error

    for a in args.arch:
        try:
            gpu.parse_arch_list(a)
        except gpu.ArchError as e:
            return usage_error(f"--arch {a!r}: {e}")
    s = settings_of(args)
    if args.lock:
        return _build_lock(args, s)
    sign = Path(args.sign).expanduser() if args.sign else None
    if sign is not None:  # a key that cannot sign fails now, not after the builds
        from ..base.errors import KernelCacheError
        from ..storage.prebuilt_sign import check_signer

        try:
            check_signer(sign)
        except KernelCacheError as e:
            return usage_error(str(e))
    refs, search = list(args.spec), [os.getcwd()]
    if args.from_ini:  # the project's own kernels, as its pytest runs declare them
        from .project_ini import ini_spec_refs

        ini, found = ini_spec_refs(Path.cwd())
        if not found:
            return usage_error(f"{ini} sets no kernelcache_specs")
        refs += found
        search = [str(ini.parent), os.getcwd()]
    specs = None
    if refs or args.names:
        try:
            specs = records.resolve(list(args.names), refs, s, default_all=False, search=search)
        except UnknownKernel as e:
            return usage_error(f"{e}; a project's kernel is exported with --spec MODULE:FUNC (a callable "
                               "returning its KernelSpec; a torch extension's: kernelcache.cpp_extension.make_spec"
                               "(name, sources, ...)) or --from-ini (the pytest ini's kernelcache_specs)")
    shipped = specs is not None or not (args.flashinfer or args.sglang)  # --flashinfer/--sglang alone: only those
    needs_arch = any(sp.is_cuda for sp in specs.values()) if specs is not None else shipped
    no_arch = arch_problem(s) if needs_arch and not args.arch else None
    if no_arch:
        return usage_error(no_arch)
    report = build_artifact_root(None, list(args.arch), Path(args.out), s, specs=specs, sign=sign) if shipped else []
    if args.flashinfer:  # each module's arch is its own gencode set (FlashInfer's choice)
        report += export_flashinfer(list(args.flashinfer), Path(args.out), s, sign)
    if args.sglang:  # each module on SGLang's own target
        report += export_sglang(list(args.sglang), Path(args.out), s, sign)
    for r in report:
        print(f"{r['name']:<28} {r['status']:<8} {r.get('arch') or 'cpu':<6} {r.get('seconds', 0):.1f}s {r.get('reason', '')}")
    return 1 if any(r["status"] == Status.FAILED for r in report) else 0


def _build_lock(args, s) -> int:
    """``build --lock PATH``: exactly the locked set (the lock names the kernels, nothing else)."""
    from ..base.errors import KernelCacheError
    from ..export.lock import build_locked
    from .cache import usage_error

    if args.names or args.spec or args.from_ini or args.flashinfer or args.sglang:
        return usage_error("--lock builds exactly the locked set: no kernel names, --spec, --from-ini, --flashinfer "
                           "or --sglang with it")
    try:
        report = build_locked(args.lock, list(args.arch), Path(args.out), s)
    except KernelCacheError as e:  # an unreadable lock: said once, nothing built
        print(f"kernelcache: {e}", file=sys.stderr)
        return 1
    for r in report:
        print(f"{r['name']:<28} {r['status']:<8} {r.get('arch') or 'cpu':<6} {r.get('seconds', 0):.1f}s {r.get('reason', '')}")
    return 1 if not report or any(r["status"] == Status.FAILED for r in report) else 0


def cmd_pack(args) -> int:
    from .cache import usage_error

    if args.oci:
        from ..export.oci import OciLayoutError, pack_oci

        try:
            desc = pack_oci(Path(args.root), Path(args.oci), args.tag or "latest")
        except OciLayoutError as e:
            return usage_error(str(e))
        print(f"{args.oci}:{desc['annotations']['org.opencontainers.image.ref.name']} {desc['digest']} "
              f"{desc['size']}")
        return 0
    if not args.tag:
        return usage_error("pack needs --tag (the wheel's name suffix, e.g. sm90), or --oci DIR")
    from ..export.roots import pack_wheel

    print(pack_wheel(Path(args.root), Path(args.out), args.tag, args.version))
    return 0
