"""What ``-march=native`` / ``-mcpu=native`` / ``-mtune=native`` mean on this host.

Why: the flag is the same string on every host, but the code it produces is not. Kernel
libraries build CPU ops with ``-march=native`` (DeepSpeed's op builders always do), so a key that
hashed the literal string would hand an AVX-512 binary to a host without AVX-512: an
illegal-instruction crash, not a miss. The compiler reports what the flag expands to (``-###``
prints the driver's expanded cc1 command line: ``-march=znver3 -mavx512f ...`` for gcc,
``-target-cpu`` / ``-target-feature`` for clang); that expansion goes into the key, and the CPU
features it enables (as ``/proc/cpuinfo`` names them) are recorded so a host whose CPU lacks one
refuses the entry with a clear reason. Expansions are memoised per compiler identity (its stat),
like tool identities; CPU features per process.
"""
from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Iterable

from ..base import process_state
from . import toolchain

NATIVE_FLAGS = ("-march=native", "-mcpu=native", "-mtune=native")
CPUINFO = "/proc/cpuinfo"
# gcc/clang feature names whose /proc/cpuinfo name differs beyond '.', '-', '_' (compared without them)
_ALIASES = {"pclmul": "pclmulqdq", "sha": "shani", "rdrnd": "rdrand", "sse3": "pni", "lzcnt": "abm",
            "sahf": "lahflm", "bmi": "bmi1", "prfchw": "3dnowprefetch", "crc32": "sse42"}

_lock = threading.Lock()
_cpu: frozenset[str] | None = None


def _reset() -> None:
    global _cpu
    with _lock:
        _cpu = None


process_state.register("native.cpu_features", _reset)


def native_flags(*flag_lists: Iterable[str]) -> list[str]:
    """The native flags among command-line tokens (``-Xcompiler=-march=native`` counts too)."""
    found: list[str] = []
    for flags in flag_lists:
        for tok in flags:
            for f in NATIVE_FLAGS:
                if f in str(tok) and f not in found:
                    found.append(f)
    return found


# -- this CPU ------------------------------------------------------------------------------------
def cpu_features(path: str = CPUINFO) -> frozenset[str]:
    """The CPU feature flags of this host (``flags`` on x86, ``Features`` on Arm); empty when
    unreadable."""
    global _cpu
    if path == CPUINFO and _cpu is not None:
        return _cpu
    feats: frozenset[str] = frozenset()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip().lower() in ("flags", "features"):
                    feats = frozenset(value.split())
                    break
    except OSError:
        pass
    if path == CPUINFO:
        with _lock:
            _cpu = feats
    return feats


def _norm(name: str) -> str:
    return name.lower().replace(".", "").replace("-", "").replace("_", "")


# -- the compiler's expansion -------------------------------------------------------------------
def _expanded_tokens(stderr: str) -> list[str]:
    """The target tokens of the compiler proper's command line in ``-###`` output."""
    import shlex  # only when the flags are probed (memoized on disk): off the warm path

    for line in stderr.splitlines():
        try:
            argv = shlex.split(line)
        except ValueError:
            continue
        if not argv or not ("cc1" in os.path.basename(argv[0]) or "-cc1" in argv):
            continue
        out: list[str] = []
        it = iter(range(len(argv)))
        for i in it:
            a = argv[i]
            if a in ("-target-cpu", "-target-feature", "-tune-cpu") and i + 1 < len(argv):
                out += [a, argv[i + 1]]
                next(it, None)
            elif a.startswith(("-march=", "-mtune=", "-mcpu=")) or (
                    a.startswith("-m") and not a.startswith(("-mf=", "-mllvm")) and "=" not in a and len(a) > 2):
                out.append(a)
            elif a == "--param" and i + 1 < len(argv) and "cache" in argv[i + 1]:
                out += [a, argv[i + 1]]
                next(it, None)
            elif a.startswith("--param=") and "cache" in a:
                out.append(a)
        return out
    return []


def expansion(compiler: str, flags: list[str], memo_dir: Path | None = None) -> dict:
    """``{"flags", "expanded", "error"}``: what ``flags`` (native ones) mean to ``compiler`` here.

    Memoised per process and on disk by the compiler's stat and this CPU's features (the same
    binary expands differently on another CPU), so a warm load starts no subprocess.
    """
    real = os.path.realpath(compiler)
    skey = (*toolchain.stat_key(real), *sorted(flags), ",".join(sorted(cpu_features())))

    def compute() -> dict:
        try:
            proc = subprocess.run([real, *flags, "-###", "-E", "-x", "c++", os.devnull], capture_output=True,
                                  text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            return {"flags": flags, "expanded": [], "error": f"{real} -###: {e}"}
        toks = _expanded_tokens(proc.stderr)
        err = "" if toks else f"{real} did not report an expansion of {' '.join(flags)} (exit {proc.returncode})"
        return {"flags": flags, "expanded": toks, "error": err}

    return toolchain.disk_memo("native", skey, compute, memo_dir)


def required_features(expanded: list[str], host: frozenset[str]) -> list[str]:
    """The CPU features an expansion enables, named as ``/proc/cpuinfo`` names them here.

    Without an expansion (the compiler could not say), every feature of this CPU is required:
    the binary may use any of them.
    """
    if not expanded:
        return sorted(host)
    by_norm = {_norm(f): f for f in host}
    wanted: list[str] = []
    toks = iter(expanded)
    for t in toks:
        if t == "-target-feature":
            t = next(toks, "")
            feat = t[1:] if t.startswith("+") else ""
        elif t.startswith("-m") and not t.startswith(("-mno-", "-march=", "-mtune=", "-mcpu=")):
            feat = t[2:]
        else:
            continue
        n = _norm(feat)
        name = by_norm.get(_ALIASES.get(n, n)) or by_norm.get(n)
        if name and name not in wanted:
            wanted.append(name)
    return sorted(wanted)


def key_inputs(compiler: str, flag_lists: Iterable[Iterable[str]], memo_dir: Path | None = None) -> dict | None:
    """What the key and the manifest record for a spec's native flags (None: it has none)."""
    flags = native_flags(*flag_lists)
    if not flags:
        return None
    exp = expansion(compiler, flags, memo_dir)
    host = cpu_features()
    out = {"flags": flags, "expanded": list(exp["expanded"]),
           "cpu_features": required_features(list(exp["expanded"]), host)}
    if exp.get("error"):
        out["error"] = exp["error"]
    return out


def missing_features(native: dict | None) -> list[str]:
    """Recorded CPU features this host lacks (empty: it can run the binary)."""
    need = set((native or {}).get("cpu_features") or ())
    if not need:
        return []
    have = cpu_features()
    return sorted(need - have) if have else ["<this CPU's features are unknown>"]
