"""Descriptions of every subcommand and help for every option that was declared without one.

Why a table apart from the parsers: each ``--help`` page must say what the command does (not
only its one-line summary in the command list) and every option must say what it means; one
table keeps that text in one place, and :func:`document` fills in only what a parser left
empty, so a description written next to a parser always wins.
"""
from __future__ import annotations

import argparse

DESCRIPTIONS: dict[tuple[str, ...], str] = {
    ("warm",): "Build or load kernels into the local cache (all shipped kernels by default, or the "
               "named ones: shipped, or user and drop-in kernels the cache has records of) and print "
               "one row per kernel: hit, built, prebuilt, remote, failed or skipped, with the reason. "
               "Exit 1 if a kernel failed; exit 2 on a CUDA arch that cannot be parsed.",
    ("ls",): "List the entries of the local cache (built here or fetched from the fleet cache) and of "
             "every prebuilt artifact root, from paths and stats only.",
    ("stats",): "One row per kernel the cache holds (shipped, user and drop-in kernels): entries built "
                "here, entries fetched, size on disk, last use.",
    ("verify",): "Re-hash every cached .so (and every prebuilt one) against its manifest: size and "
                 "sha256. Exit 1 if any is bad; --fix moves bad local entries to quarantine/.",
    ("explain",): "What a kernel's level-1 key is made of, whether a load would hit (prebuilt, local, "
                  "fetched) or miss, and why every candidate entry would be refused. Read-only: "
                  "nothing is loaded, built, quarantined or stamped.",
    ("prune",): "Evict least-recently-used entries beyond a size cap and/or older than an age. "
                "Quarantined entries go first; eviction renames before deleting, so a process that "
                "has a .so mapped keeps running.",
    ("clean",): "Remove the whole cache directory (asks first on a terminal unless -y).",
    ("doctor",): "Report every tool and header set the builds use (compiler, ninja, tvm-ffi, CUDA, "
                 "GPUs, FlashInfer/curand headers, prebuilt roots, fleet cache). Exit 1 if something "
                 "the CPU path needs is missing.",
    ("build",): "Build kernels into a relocatable prebuilt artifact root (one build per --arch) that "
                "serving hosts without a compiler load from (KERNELCACHE_PREBUILT or a companion "
                "wheel made by `kernelcache pack`). A project's own kernels come from --spec MOD:FUNC or "
                "--from-ini (KernelSpecs of any kind: a torch extension's is kernelcache.cpp_extension."
                "make_spec(name, sources, ...), the spec of that load call). --flashinfer exports FlashInfer JIT modules, "
                "built through the FlashInfer route, labelled with the installed FlashInfer's version; "
                "--sglang the modules an SGLang kernel factory loads, through the SGLang route, labelled with "
                "the installed SGLang's version.",
    ("pack",): "Pack an artifact root written by `kernelcache build` into a companion wheel that "
               "registers it through the kernelcache.prebuilt entry point.",
    ("push",): "Upload entries built on this host to the fleet cache. Needs a remote in readwrite "
               "mode (--remote URL --remote-mode readwrite, or the environment).",
    ("affected",): "The tests a change since REF can affect: the test impact map (what each test used, "
                   "recorded by pytest --kc-impact-map=PATH) against git diff REF...HEAD plus uncommitted "
                   "changes. Without a map, everything is selected.",
    ("remote",): "Inspect or maintain the fleet cache (the remote given by --remote or "
                 "KERNELCACHE_REMOTE).",
    ("remote", "ls"): "List the fleet cache's entries: kernel, entry id, source key, size, when written.",
    ("remote", "verify"): "Re-hash every blob the fleet cache holds against the manifests that name "
                          "it; exit 1 if any entry is damaged.",
    ("remote", "trim"): "Delete fleet-cache entries older than an age.",
    ("remote", "keygen"): "Write an Ed25519 key pair: the private key signs manifests on writers "
                          "(KERNELCACHE_REMOTE_SIGNING_KEY), the public one verifies them on readers "
                          "(KERNELCACHE_REMOTE_VERIFY_KEYS).",
}

# (command path, argparse dest) -> help, for options declared without one
OPTION_HELP: dict[tuple[tuple[str, ...], str], str] = {
    (("warm",), "names"): "kernel names: shipped, defined by --spec, or ones the cache has records of "
                          "(default: every shipped kernel, or the --spec ones)",
    (("warm",), "jobs"): "kernels built in parallel (default: half the CPUs)",
    (("warm",), "json"): "print the results as JSON",
    (("ls",), "name"): "only this kernel",
    (("ls",), "json"): "print the entries as JSON",
    (("stats",), "name"): "only this kernel",
    (("stats",), "json"): "print the summary as JSON",
    (("verify",), "name"): "only this kernel (default: every entry)",
    (("explain",), "name"): "kernel name: shipped, defined by --spec, or one the cache has records of",
    (("explain",), "json"): "print the whole explanation as JSON",
    (("clean",), "yes"): "do not ask for confirmation",
    (("build",), "names"): "kernel names: shipped, or defined by --spec/--from-ini (default: every shipped kernel, "
                           "or every --spec/--from-ini one; none when only --flashinfer/--sglang is given)",
    (("build",), "from_ini"): "also the kernelcache_specs of the pytest ini file (pytest.ini, pyproject.toml, "
                              "tox.ini, setup.cfg) at or above the current directory",
    (("build",), "out"): "directory of the artifact root to write",
    (("pack",), "root"): "artifact root written by `kernelcache build`",
    (("pack",), "out"): "directory the wheel is written to (default: dist)",
    (("pack",), "version"): "version of the companion wheel (default: 0.1.0)",
    (("affected",), "json"): "print the selection as JSON (files, tests, reasons)",
    (("remote", "ls"), "json"): "print the entries as JSON",
    (("remote", "keygen"), "private"): "file to write the private key to (keep it on writers only)",
    (("remote", "keygen"), "public"): "file to write the public key to (give it to readers)",
}


def document(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """Fill in missing subcommand descriptions and option help texts (recursively)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sub_path = (*path, name)
                if not sub.description:
                    sub.description = DESCRIPTIONS.get(sub_path)
                document(sub, sub_path)
        elif not action.help and not isinstance(action, argparse._HelpAction):
            action.help = OPTION_HELP.get((path, action.dest))
    return parser


def undocumented(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """Subcommands without a description and options without help (what the CLI test checks)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not sub.description:
                    out.append(" ".join((*path, name)) + ": no description")
                out += undocumented(sub, (*path, name))
        elif not action.help and not isinstance(action, argparse._HelpAction):
            out.append(" ".join(path) + f": {'/'.join(action.option_strings) or action.dest} has no help")
    return out
