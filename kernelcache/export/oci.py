"""``kernelcache pack --oci DIR ROOT``: an artifact root as an OCI image layout, no registry client.

A Kubernetes operator pushes the directory with any OCI tool (``skopeo copy oci:DIR:TAG ...``,
``oras cp``, ``crane push``) and mounts the image read-only (an image volume, or an init container
that unpacks it); the node then points ``KERNELCACHE_PREBUILT`` at the mount. The layout is the
image-spec's directory form: ``oci-layout``, ``index.json`` and content-addressed ``blobs/sha256``
holding one image manifest, its config and one gzip'd tar layer with the root at the layer's top.

The bytes are a function of the root's files only (sorted entries, mtime 0, uid/gid 0, no user
names, normalised modes, a gzip header without name or time), so packing one root twice, on any
host with the same zlib, gives the same digests: the digest a CI job prints is the one the node
pulls. Entries' ``manifest.json`` and ``.so`` are still validated by kernelcache on the node; the
digests here only make the transport tamper-evident.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import tarfile
from pathlib import Path
from typing import Any

from ..base.layout import DEPSTAT, RECENT, USED, Layout

LAYOUT_VERSION = "1.0.0"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
TITLE = "org.opencontainers.image.title"
ROOT_ANNOTATION = "dev.kernelcache.artifact-root"  # where the root sits in the image's filesystem

# the image-spec's reference grammar for ref.name (a tag-like name; no slashes needed here)
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
           "s390x": "s390x"}
_SKIPPED = (USED, DEPSTAT, RECENT)  # per-host bookkeeping, as in a companion wheel


class OciLayoutError(ValueError):
    """The root or the target directory cannot make an image layout (said before a byte is written)."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(root: Path) -> bytes:
    """The root's files as a reproducible tar (uncompressed): the layer's diff_id is its digest."""
    root = Path(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(root.rglob("*"), key=lambda q: q.relative_to(root).as_posix()):
            if p.name in _SKIPPED or p.is_symlink():
                continue  # a root is regular files and directories; a link could point off the root
            info = tarfile.TarInfo(p.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if p.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif p.is_file():
                data = p.read_bytes()
                info.size = len(data)
                info.mode = 0o755 if os.access(p, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def _platform() -> dict[str, str]:
    machine = platform.machine().lower()
    return {"architecture": _GOARCH.get(machine, machine), "os": "linux"}


def _check_target(out: Path) -> list[dict]:
    """The manifests an existing layout at ``out`` already lists (kept: one layout, many tags)."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise OciLayoutError(f"{out} exists and is not a directory")
    marker = out / "oci-layout"
    if not marker.exists():
        if any(out.iterdir()):
            raise OciLayoutError(f"{out} is not empty and is not an OCI image layout (no oci-layout file)")
        return []
    try:
        version = json.loads(marker.read_text()).get("imageLayoutVersion")
        index = json.loads((out / "index.json").read_text())
    except (OSError, ValueError, AttributeError) as e:
        raise OciLayoutError(f"{out}: unreadable OCI image layout ({e})") from e
    if version != LAYOUT_VERSION or not isinstance(index.get("manifests"), list):
        raise OciLayoutError(f"{out}: OCI image layout {version!r} is not {LAYOUT_VERSION!r}")
    return list(index["manifests"])


def _put_blob(out: Path, data: bytes, media_type: str) -> dict[str, Any]:
    digest = _digest(data)
    path = out / "blobs" / "sha256" / digest.split(":", 1)[1]
    if not (path.is_file() and path.stat().st_size == len(data)):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def pack_oci(root: Path, out: Path, tag: str = "latest", annotations: dict[str, str] | None = None
             ) -> dict[str, Any]:
    """Write ``root`` into the OCI image layout ``out`` under ``tag`` and return the manifest's
    descriptor (digest, size, the tag). An existing layout keeps its other tags; the same tag is
    replaced. Blobs no manifest names any more are left for the pushing tool to ignore."""
    root, out = Path(root).resolve(), Path(out).resolve()
    if not Layout(root).is_artifact_root():
        raise OciLayoutError(f"{root} is not an artifact root (no v1/entries); make one with `kernelcache build`")
    if not _TAG_RE.match(tag):
        raise OciLayoutError(f"tag must match [A-Za-z0-9_][A-Za-z0-9_.-]*, got {tag!r}")
    if out == root or root in out.parents:
        raise OciLayoutError(f"{out} is inside the root {root}: the layer would hold itself")
    kept = [m for m in _check_target(out) if (m.get("annotations") or {}).get(REF_NAME) != tag]
    tar = layer_tar(root)
    plat = _platform()
    out.mkdir(parents=True, exist_ok=True)
    layer = _put_blob(out, _gzip(tar), LAYER_TYPE)
    config = {**plat, "config": {}, "rootfs": {"type": "layers", "diff_ids": [_digest(tar)]},
              "history": [{"created_by": "kernelcache pack --oci", "comment": "prebuilt kernelcache artifact root"}]}
    notes = {TITLE: f"kernelcache artifact root {tag}", ROOT_ANNOTATION: "/", **(annotations or {})}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                "config": _put_blob(out, _canonical(config), CONFIG_TYPE), "layers": [layer],
                "annotations": notes}
    desc = {**_put_blob(out, _canonical(manifest), MANIFEST_TYPE), "platform": plat,
            "annotations": {REF_NAME: tag}}
    manifests = sorted([*kept, desc], key=lambda m: ((m.get("annotations") or {}).get(REF_NAME, ""), m["digest"]))
    (out / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": LAYOUT_VERSION}))
    index = out / "index.json"
    tmp = index.with_name(f"index.json.tmp{os.getpid()}")
    tmp.write_bytes(_canonical({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}))
    os.replace(tmp, index)
    return desc
