"""`kernelcache warm | ls | stats | verify | explain | prune | clean | doctor | build | pack | push | remote`.

The CLI is a thin shell over the public API: every command works on the shipped kernels by
name (``kernelcache.kernels``) and on the settings of the environment, with the global flags
(``--remote``, ``--remote-mode``, ``--cache-dir``) on top, accepted before or after the subcommand.
"""
from __future__ import annotations

import argparse
import sys

from . import lockfile
from .cache import cmd_clean, cmd_explain, cmd_ls, cmd_prune, cmd_stats, cmd_verify, cmd_warm
from .common import GlobalSubparsers, add_global_flags, parse_age, parse_size
from .tools import cmd_build, cmd_doctor, cmd_pack

__all__ = ["main", "build_parser", "parse_age", "parse_size"]


def _add_remote_commands(sub) -> None:
    from . import remote

    remote.add_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelcache", description=__doc__.splitlines()[0])
    add_global_flags(p, after_command=False)
    sub = GlobalSubparsers(p.add_subparsers(dest="cmd", required=True))
    w = sub.add_parser("warm", help="build/load the shipped kernels into the cache and print a report")
    w.add_argument("names", nargs="*", help="kernel names: shipped, --spec, or in the cache's records "
                   "(default: all shipped, or the --spec ones)")
    w.add_argument("-j", "--jobs", type=int, default=None)
    w.add_argument("--json", action="store_true")
    w.add_argument("--spec", action="append", default=[], metavar="MOD:FUNC",
                   help="module:callable returning KernelSpec(s), as the plugin's kernelcache_specs (repeatable)")
    w.set_defaults(fn=cmd_warm)
    lockfile.add_warm_lock(w)  # warm --lock PATH
    ls = sub.add_parser("ls", help="list cache entries (and prebuilt roots)")
    ls.add_argument("name", nargs="?")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_ls)
    st = sub.add_parser("stats", help="per-kernel summary of the cache (every kernel it holds)")
    st.add_argument("name", nargs="?")
    st.add_argument("--json", action="store_true")
    st.set_defaults(fn=cmd_stats)
    v = sub.add_parser("verify", help="re-hash every cached .so against its manifest")
    v.add_argument("name", nargs="?")
    v.add_argument("--fix", action="store_true", help="quarantine bad entries")
    v.set_defaults(fn=cmd_verify)
    e = sub.add_parser("explain", help="what a kernel's key is made of and why it would miss")
    e.add_argument("name")
    e.add_argument("--json", action="store_true")
    e.add_argument("--spec", action="append", default=[], metavar="MOD:FUNC",
                   help="module:callable returning KernelSpec(s), as the plugin's kernelcache_specs (repeatable)")
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
    b = sub.add_parser("build", help="build kernels (shipped, --spec, --from-ini) into a relocatable prebuilt "
                       "artifact root")
    b.add_argument("names", nargs="*")
    b.add_argument("--spec", action="append", default=[], metavar="MOD:FUNC",
                   help="module:callable returning KernelSpec(s), as the plugin's kernelcache_specs (repeatable)")
    b.add_argument("--from-ini", action="store_true")
    b.add_argument("--arch", action="append", default=[], help="CUDA arch (repeatable), e.g. 9.0")
    b.add_argument("--out", required=True)
    b.add_argument("--lock", default=None, metavar="PATH",
                   help="build exactly the kernels the kernel lock PATH names, each from its lock block (for each "
                   "--arch, else each arch the lock records); a kernel that drifted from the lock is not built")
    b.add_argument("--sign", default=None, metavar="KEYFILE",
                   help="Ed25519 private key (kernelcache remote keygen): sign each entry's manifest and binary "
                   "(signature.json); hosts with KERNELCACHE_PREBUILT_VERIFY_KEYS serve only signed entries")
    b.add_argument("--flashinfer", action="append", default=[], metavar="MOD:FUNC[(ARGS)]",
                   help="a FlashInfer module (or list) to export, built through the FlashInfer route, e.g. "
                   "'flashinfer.jit.activation:gen_act_and_mul_module(\"silu\")' (repeatable; literal ARGS)")
    b.add_argument("--sglang", action="append", default=[], metavar="MOD:FUNC[(ARGS)]",
                   help="an SGLang kernel factory whose load_jit modules to export, built through the SGLang "
                   "route, e.g. 'sglang.kernels.ops.speculative.ngram_corpus:get_ngram_corpus_cls' (repeatable)")
    b.set_defaults(fn=cmd_build)
    pk = sub.add_parser("pack", help="pack an artifact root into a companion wheel (or, with --oci DIR, an OCI "
                        "image layout)")
    pk.add_argument("root")
    pk.add_argument("--tag", default=None, help="wheel name suffix, e.g. sm90 (required for a wheel); with --oci "
                    "the image's tag (default: latest)")
    pk.add_argument("--oci", default=None, metavar="DIR", help="write an OCI image layout (oci-layout, index.json, "
                    "blobs/sha256) holding the root as one layer, instead of a wheel: push it with any OCI tool")
    pk.add_argument("--out", default="dist")
    pk.add_argument("--version", default="0.1.0")
    pk.set_defaults(fn=cmd_pack)
    _add_remote_commands(sub)
    lockfile.add_parsers(sub)  # kernelcache lock check|update
    __import__("kernelcache.cli.impact", fromlist=["add_parsers"]).add_parsers(sub)  # kernelcache affected
    from .help import document

    return document(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..base.errors import KernelCacheError, UnknownKernel

    try:
        return int(args.fn(args) or 0)
    except UnknownKernel as e:
        print(f"kernelcache: {e}", file=sys.stderr)
        return 2
    except (KernelCacheError, ValueError) as e:
        print(f"kernelcache: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kernelcache affected ... | head`: the reader left, not an error of ours
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command whose pipe closed


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered
    raises no second BrokenPipeError (and prints no traceback) on the way out."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
