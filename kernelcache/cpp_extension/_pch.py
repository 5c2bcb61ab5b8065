"""``load_inline(..., use_pch=True)``: a precompiled ``torch/extension.h``, kept in the cache.

torch's meaning: the ~40 s of parsing ``torch/extension.h`` is paid once and shared by every
inline extension compiled with the same flags. torch writes ``extension.h.gch`` next to the
header inside its installation, decides reuse by a signature of its command line (never by the
headers' content) and lets g++ silently skip a precompiled header that does not fit.

Here the precompiled header lives in ``<cache>/v1/dropin/pch/<flags>/<content>/torch/extension.h.gch``:

* keyed by the compiler's identity and the extension's compile flags (less the name define,
  which the header never reads), so extensions with the same flags share one;
* built under a file lock into a private directory and published by one rename, named by the
  digest of every file the compiler read (``-MD``, sha256 each, listed next to it) and of the
  ``.gch``; extensions name that directory in their flags, so their keys follow its content;
* validated before each use: the recorded files must still hold the recorded bytes (a stat
  fingerprint stands in for the hash while unchanged), the ``.gch`` too; otherwise it is rebuilt,
  never used stale;
* used through ``-I<dir>`` ahead of torch's include dirs (g++ looks for ``torch/extension.h.gch``
  in each directory before the header) with ``-Winvalid-pch``: a precompiled header g++ still
  refuses is reported (a warning) instead of silently costing the full parse.

For torch's own code paths, the header is also published where torch looks
(``torch/include/torch/extension.h.gch`` + ``.sign``), as torch's ``use_pch`` does (best effort).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.layout import Layout
from ..base.spec import KernelSpec
from ..host import toolchain
from ._versions import NAME_DEFINE

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

HEADER = os.path.join("torch", "extension.h")
FORMAT = 1


class PchError(RuntimeError):
    """The precompiled header could not be built (torch raises a RuntimeError here too)."""


def header_path(spec: KernelSpec) -> str | None:
    for d in spec.system_include_dirs:
        p = os.path.join(d, HEADER)
        if os.path.isfile(p):
            return p
    return None


def pch_flags(spec: KernelSpec) -> list[str]:
    """The extension's C++ flags that the precompiled header must share (the name define left out)."""
    return [f for f in spec.cflags if not f.startswith(NAME_DEFINE)]


def _key(cxx: str, header: str, flags: list[str], memo_dir: Path) -> str:
    ident = toolchain.tool_identity(cxx, memo_dir)
    facts = {"format": FORMAT, "cxx": [ident.get("path"), ident.get("version"), ident.get("size")],
             "header": header, "flags": flags}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def _fingerprint(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _parse_depfile(text: str) -> list[str]:
    body = text.replace("\\\n", " ").split(":", 1)[-1]
    out, cur, i = [], "", 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == " ":
            cur, i = cur + " ", i + 2
            continue
        if c.isspace():
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        out.append(cur)
    return out


def _gch(d: Path) -> Path:
    return d / "torch" / "extension.h.gch"


def is_valid(d: Path) -> bool:
    """Every file the header was built from, and the .gch, still hold their recorded bytes."""
    try:
        record = json.loads((d / "deps.json").read_text())
        files = [*record["files"], [str(_gch(d)), record["gch"][0], record["gch"][1]]]
        for path, digest, fp in files:
            if _fingerprint(path) != fp and toolchain.sha256_file(path) != digest:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def _current(flag_dir: Path) -> Path | None:
    try:
        name = (flag_dir / "current").read_text().strip()
    except OSError:
        return None
    return flag_dir / name if name else None


def _build(flag_dir: Path, cxx: str, header: str, flags: list[str]) -> Path:
    """Build into a private dir, publish as ``<flag_dir>/<content digest>`` and point ``current`` at it."""
    tmp = flag_dir / f".tmp.{os.getpid()}.{os.urandom(4).hex()}"
    _gch(tmp).parent.mkdir(parents=True)
    dep = tmp / "extension.d"
    argv = [cxx, "-x", "c++-header", header, "-o", str(_gch(tmp)), "-MD", "-MF", str(dep), *flags]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise PchError(f"Compile PreCompile Header fail, command: {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
        paths = [os.path.realpath(p) for p in _parse_depfile(dep.read_text())]
        dep.unlink()
        files = [[p, toolchain.sha256_file(p), _fingerprint(p)] for p in dict.fromkeys(paths)]
        gch_sha = toolchain.sha256_file(_gch(tmp))
        digest = hashlib.sha256(json.dumps([[f[0], f[1]] for f in files] + [gch_sha]).encode()).hexdigest()[:32]
        final = flag_dir / digest
        if not is_valid(final):
            (tmp / "deps.json").write_text(json.dumps({"format": FORMAT, "command": argv, "files": files,
                                                       "gch": [gch_sha, None]}))
            if final.exists():  # damaged: set aside, replaced by one rename
                os.rename(final, flag_dir / f".stale.{os.getpid()}.{os.urandom(4).hex()}")
            os.rename(tmp, final)
            record = json.loads((final / "deps.json").read_text())
            record["gch"][1] = _fingerprint(str(_gch(final)))  # its stat is only known at its final path
            (final / "deps.json").write_text(json.dumps(record))
        pointer = flag_dir / f".current.{os.getpid()}"
        pointer.write_text(digest)
        os.replace(pointer, flag_dir / "current")
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(spec: KernelSpec, settings: "Settings") -> Path | None:
    """The directory holding a valid precompiled header for ``spec``'s flags (built if needed);
    None when there is nothing to precompile (no torch/extension.h among the include dirs).

    The directory is named by the digest of what the header was built from (every file the
    compiler read, and the .gch), and extensions name that directory in their flags: when torch's
    headers change, the header is rebuilt under a new name, so every extension's key changes too
    (g++ does not list a precompiled header's inputs in the extension's own depfile)."""
    header = header_path(spec)
    if header is None or not any(str(s).endswith((".cpp", ".cc", ".cxx")) for s in spec.sources):
        return None
    cxx = os.path.realpath(toolchain.find_cxx())
    flags = pch_flags(spec)
    flag_dir = Layout(settings.cache_dir).dropin / "pch" / _key(cxx, header, flags, settings.memo_dir)
    d = _current(flag_dir)
    if d is not None and is_valid(d):
        return d
    flag_dir.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(flag_dir / "lock")):
        d = _current(flag_dir)  # double-checked: another process may have built it meanwhile
        if d is not None and is_valid(d):
            return d
        return _build(flag_dir, cxx, header, flags)


def apply(spec: KernelSpec, settings: "Settings") -> KernelSpec:
    """``spec`` compiled against the shared precompiled header (unchanged when none applies)."""
    import dataclasses

    d = ensure(spec, settings)
    if d is None:
        return spec
    return dataclasses.replace(spec, cflags=[f"-I{d}", "-Winvalid-pch", *spec.cflags],
                               include_dirs=[str(d), *spec.include_dirs])


def warn_if_unused(build_log: str, name: str) -> None:
    """g++'s -Winvalid-pch said it skipped the precompiled header: say so once, as a warning."""
    lines = [ln for ln in build_log.splitlines() if "Winvalid-pch" in ln or ".gch" in ln and "not used" in ln]
    if lines:
        warnings.warn(f"extension {name!r}: the precompiled torch/extension.h was not used: {lines[0].strip()}",
                      RuntimeWarning, stacklevel=3)


def publish_for_torch(spec: KernelSpec, extra_cflags, extra_include_paths) -> None:
    """Best effort, after a load that used it: torch's own ``extension.h.gch`` (+ ``.sign``), as
    torch's ``use_pch`` leaves them, so torch's code paths (and tests) see what ``use_pch=True``
    promises. The cache's copy is the one the drop-in compiles against; this one is only ever read
    by torch itself."""
    header = header_path(spec)
    d = next((Path(f[2:]) for f in spec.cflags if f.startswith("-I") and (Path(f[2:]) / "deps.json").is_file()), None)
    if header is None or d is None:
        return
    try:
        sign = _torch_signature(header, spec, extra_cflags, extra_include_paths)
        sign_path = header + ".sign"
        if os.path.isfile(header + ".gch") and os.path.isfile(sign_path) and Path(sign_path).read_text() == sign:
            return
        tmp = f"{header}.gch.{os.getpid()}.tmp"
        # A copy, not a link (~0.8 GB for torch 2.13): torch rewrites its file in place when it
        # rebuilds it, which must never touch the cache's bytes.
        try:
            shutil.copyfile(str(d / HEADER) + ".gch", tmp)
            os.replace(tmp, header + ".gch")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        Path(sign_path).write_text(sign)
    except Exception:  # noqa: BLE001 - a read-only installation, another torch: only the cache's copy is used
        pass


def _torch_signature(header: str, spec: KernelSpec, extra_cflags, extra_include_paths) -> str:
    """The signature torch (2.x) writes next to its precompiled header: its command line for these
    arguments with spaces as underscores (torch rebuilds its header when it differs)."""
    import re
    import sysconfig

    import torch.utils.cpp_extension as tce

    compiler = tce._shell_join(tce._wrap_compiler(tce.get_cxx_compiler()))
    inc = os.path.dirname(os.path.dirname(header))
    dirs = [inc, sysconfig.get_path("include"), os.path.join(inc, "torch", "csrc", "api", "include")]
    std = next((f for f in spec.cflags if f.startswith("-std=")), "-std=c++17")
    parts = [compiler, "-x c++-header", header, "-o", header + ".gch", " ".join(f"-I {x}" for x in dirs),
             " ".join(f"-I{x}" for x in (extra_include_paths or [])), " ".join(extra_cflags or []),
             f"-DTORCH_API_INCLUDE_EXTENSION_H {std} -fPIC"]
    return re.sub(r"[ \n]+", " ", " ".join(parts)).strip().replace(" ", "_")
