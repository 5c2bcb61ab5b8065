"""Pack an artifact root into a companion wheel (``kernelcache-prebuilt-<tag>``).

The wheel holds the root as package data and registers it in the ``kernelcache.prebuilt``
entry-point group, so installing it next to kernelcache is all a serving host needs. Written
directly with zipfile (the wheel format is a zip with a dist-info directory), so packing needs
no build backend and no network.
"""
from __future__ import annotations

import base64
import hashlib
import platform
import re
import zipfile
from pathlib import Path

_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def pack_wheel(root: Path, out_dir: Path, tag: str, version: str = "0.1.0") -> Path:
    """Write ``kernelcache_prebuilt_<tag>-<version>-py3-none-linux_<arch>.whl`` into out_dir."""
    root = Path(root).resolve()
    if not _TAG_RE.match(tag):
        raise ValueError(f"tag must match [a-z0-9_]+, got {tag!r}")
    if not (root / "v1" / "entries").is_dir():
        raise ValueError(f"{root} is not an artifact root (no v1/entries); make one with `kernelcache build`")
    pkg = f"kernelcache_prebuilt_{tag}"
    dist = f"kernelcache_prebuilt_{tag}-{version}"
    plat = f"linux_{platform.machine()}"
    files: dict[str, bytes] = {
        f"{pkg}/__init__.py": (
            '"""Prebuilt kernelcache artifacts (validated by kernelcache before use)."""\n'
            "from pathlib import Path\n\n\n"
            "def root() -> Path:\n    return Path(__file__).parent / \"root\"\n"
        ).encode(),
    }
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in ("used", "depstat.json"):
            files[f"{pkg}/root/{p.relative_to(root).as_posix()}"] = p.read_bytes()
    files[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: kernelcache-prebuilt-{tag.replace('_', '-')}\nVersion: {version}\n"
        "Summary: Prebuilt kernelcache artifact root\nRequires-Dist: kernelcache\n"
    ).encode()
    files[f"{dist}.dist-info/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: kernelcache.pack\nRoot-Is-Purelib: false\nTag: py3-none-{plat}\n"
    ).encode()
    files[f"{dist}.dist-info/entry_points.txt"] = f"[kernelcache.prebuilt]\n{tag} = {pkg}:root\n".encode()
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()]
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    whl = out_dir / f"{dist}-py3-none-{plat}.whl"
    with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return whl
