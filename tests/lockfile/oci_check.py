"""The OCI image-spec's rules for an image layout, checked from the files alone (no registry tool).

Shared by the OCI and end-to-end tests: every descriptor's digest and size recomputed from its
blob, media types, the config's diff_ids against the uncompressed layer, nothing unreferenced.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def blob(layout: Path, desc: dict) -> bytes:
    """The blob a descriptor names, after checking its digest and size against the bytes."""
    assert DIGEST.match(desc["digest"]), desc
    data = (layout / "blobs" / "sha256" / desc["digest"].split(":")[1]).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"], desc
    assert len(data) == desc["size"], desc
    return data


def validate(layout: Path) -> dict[str, dict]:
    """Validate the layout; return {tag: {"manifest", "config", "layer_tar"}} per image."""
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2 and index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    seen, images = set(), {}
    for desc in index["manifests"]:
        assert desc["mediaType"] == MANIFEST
        manifest = json.loads(blob(layout, desc))
        assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == MANIFEST
        assert manifest["config"]["mediaType"] == CONFIG
        config = json.loads(blob(layout, manifest["config"]))
        assert config["os"] == "linux" and config["architecture"]
        assert config["rootfs"]["type"] == "layers"
        assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"]) == 1
        assert desc["platform"] == {"os": config["os"], "architecture": config["architecture"]}
        layer_desc = manifest["layers"][0]
        assert layer_desc["mediaType"] == LAYER
        tar = gzip.decompress(blob(layout, layer_desc))
        assert config["rootfs"]["diff_ids"][0] == "sha256:" + hashlib.sha256(tar).hexdigest()
        seen |= {desc["digest"], manifest["config"]["digest"], layer_desc["digest"]}
        images[desc["annotations"]["org.opencontainers.image.ref.name"]] = {
            "manifest": manifest, "config": config, "layer_tar": tar}
    on_disk = {"sha256:" + p.name for p in (layout / "blobs" / "sha256").iterdir()}
    assert on_disk >= seen and not [p for p in layout.rglob("*.tmp*")], on_disk - seen
    return images


def extract(layer_tar: bytes, dest: Path) -> list[tarfile.TarInfo]:
    """Unpack a layer as a node would (the tar's own rules checked first: relative names, plain
    files and directories, fixed owner and time)."""
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        members = tar.getmembers()
        for m in members:
            assert not m.name.startswith("/") and ".." not in m.name.split("/"), m.name
            assert (m.isfile() or m.isdir()) and m.mtime == 0 and m.uid == m.gid == 0 and not m.uname, m.name
        tar.extractall(dest, filter="data")
    return members
