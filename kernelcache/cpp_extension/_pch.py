"""``load_inline(..., use_pch=True)``: a precompiled ``torch/extension.h``, kept in the cache.

torch's meaning: the ~40 s of parsing ``torch/extension.h`` is paid once and shared by every
inline extension compiled with the same flags. torch writes ``extension.h.gch`` next to the
header inside its installation, decides reuse by a signature of its command line (never by the
headers' content) and lets g++ silently skip a precompiled header that does not fit.

Here the precompiled header lives in ``<cache>/v1/dropin/pch/<key>/torch/extension.h.gch``:

* keyed by the compiler's identity and the extension's compile flags (less the name define,
  which the header never reads), so extensions with the same flags share one;
* built under a file lock into a private directory and published by one rename, with the list
  of every file the compiler read (``-MD``) and their sha256 next to it;
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

from .. import toolchain
from ..layout import Layout
from ..spec import KernelSpec
from ._versions import NAME_DEFINE

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

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


def is_valid(d: Path) -> bool:
    """Every file the header was built from (and the .gch) still holds its recorded bytes."""
    try:
        record = json.loads((d / "deps.json").read_text())
        for path, digest, fp in record["files"]:
            if _fingerprint(path) != fp and toolchain.sha256_file(path) != digest:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _build(final: Path, cxx: str, header: str, flags: list[str]) -> None:
    tmp = final.parent / f".tmp.{os.getpid()}.{os.urandom(4).hex()}"
    gch = tmp / HEADER
    gch = gch.with_name(gch.name + ".gch")
    gch.parent.mkdir(parents=True)
    dep = tmp / "extension.d"
    argv = [cxx, "-x", "c++-header", header, "-o", str(gch), "-MD", "-MF", str(dep), *flags]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise PchError(f"Compile PreCompile Header fail, command: {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
        files = [os.path.realpath(p) for p in _parse_depfile(dep.read_text())]
        dep.unlink()
        record = [[p, toolchain.sha256_file(p), _fingerprint(p)] for p in dict.fromkeys(files)]
        record.append([str(final / HEADER) + ".gch", toolchain.sha256_file(gch), None])
        (tmp / "deps.json").write_text(json.dumps({"format": FORMAT, "command": argv, "files": record}))
        if final.exists():  # an invalid one: set aside, then replaced by one rename
            aside = final.parent / f".stale.{os.getpid()}.{os.urandom(4).hex()}"
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # The .gch's own fingerprint is only known at its final path.
    record_path = final / "deps.json"
    data = json.loads(record_path.read_text())
    data["files"][-1][2] = _fingerprint(data["files"][-1][0])
    record_path.write_text(json.dumps(data))


def ensure(spec: KernelSpec, settings: "Settings") -> Path | None:
    """The directory holding a valid precompiled header for ``spec``'s flags (built if needed);
    None when there is nothing to precompile (no torch/extension.h, or not a g++)."""
    header = header_path(spec)
    if header is None or not any(s.endswith((".cpp", ".cc", ".cxx")) for s in spec.sources):
        return None
    cxx = os.path.realpath(toolchain.find_cxx())
    flags = pch_flags(spec)
    base = Layout(settings.cache_dir).dropin / "pch"
    final = base / _key(cxx, header, flags, settings.memo_dir)
    if is_valid(final):
        return final
    base.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(base / f"{final.name}.lock")):
        if not is_valid(final):  # double-checked: another process may have built it meanwhile
            _build(final, cxx, header, flags)
    return final


def apply(spec: KernelSpec, settings: "Settings", extra_cflags=None, extra_include_paths=None) -> KernelSpec:
    """``spec`` compiled against the shared precompiled header (unchanged when none applies)."""
    import dataclasses

    d = ensure(spec, settings)
    if d is None:
        return spec
    _publish_for_torch(d, spec, extra_cflags, extra_include_paths)
    return dataclasses.replace(spec, cflags=[f"-I{d}", "-Winvalid-pch", *spec.cflags],
                               include_dirs=[str(d), *spec.include_dirs])


def warn_if_unused(build_log: str, name: str) -> None:
    """g++'s -Winvalid-pch said it skipped the precompiled header: say so once, as a warning."""
    lines = [ln for ln in build_log.splitlines() if "Winvalid-pch" in ln or ".gch" in ln and "not used" in ln]
    if lines:
        warnings.warn(f"extension {name!r}: the precompiled torch/extension.h was not used: {lines[0].strip()}",
                      RuntimeWarning, stacklevel=3)


def _publish_for_torch(d: Path, spec: KernelSpec, extra_cflags, extra_include_paths) -> None:
    """Best effort: torch's own ``extension.h.gch`` (+ ``.sign``), as torch's ``use_pch`` leaves them,
    so torch's code paths (and tests) see what ``use_pch=True`` promises. The cache's copy is the
    one the drop-in compiles against; this one is only ever read by torch itself."""
    header = header_path(spec)
    if header is None:
        return
    try:
        sign = _torch_signature(header, spec, extra_cflags, extra_include_paths)
        sign_path = header + ".sign"
        if os.path.isfile(header + ".gch") and os.path.isfile(sign_path) and Path(sign_path).read_text() == sign:
            return
        tmp = f"{header}.gch.{os.getpid()}.tmp"
        shutil.copyfile(str(d / HEADER) + ".gch", tmp)
        os.replace(tmp, header + ".gch")
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
