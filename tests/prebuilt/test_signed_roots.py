"""Issue 42, item 7 (signing): ``kernelcache build --out ROOT --sign KEY`` signs each entry, and a
host with ``KERNELCACHE_PREBUILT_VERIFY_KEYS`` serves only entries a trusted key signed.

Real keys (the fleet's ``keygen``), a real root written by the CLI, real loads in subprocesses.
The attacks are the ones a writer of the root can make: replace the binary, replace the binary
*and* rewrite the manifest's checksums to match (which a root without signatures serves: the
evil answer), drop the signatures, sign with a key nobody trusts. Each is refused with its
reason, then built locally (the right answer). ``kernelcache pack`` carries the signatures.
Before: no ``--sign`` option, no ``KERNELCACHE_PREBUILT_VERIFY_KEYS``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kernelcache as kc
from kernelcache.storage.remote import signing
from tests.support import HANG_S, REPO, make_project, project_spec, replace_file, spec_code

pytest.importorskip("cryptography")

SPECS = """\
from pathlib import Path
from tests.support import project_spec

def specs():
    return [project_spec(Path(__file__).parent)]
"""
LOAD = """
{spec}
import kernelcache.lookup.loader as L
m, r = L.load_with_result(spec)
info = kc.explain(spec)
print("RESULT " + json.dumps({{"value": m.add(2, 3), "status": r.status,
                               "prebuilt": [(p["usable"], p["reason"]) for p in info["prebuilt"]]}}))
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    signing.keygen(d / "a.key", d / "a.pub")
    signing.keygen(d / "b.key", d / "b.pub")
    return {"a": d / "a.key", "a.pub": d / "a.pub", "b": d / "b.key", "b.pub": d / "b.pub"}


def _build(proj: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
    env.update(KERNELCACHE_DIR=str(cache), KERNELCACHE_LOG="0", PYTHONPATH=f"{REPO}{os.pathsep}{proj}")
    return subprocess.run([sys.executable, "-m", "kernelcache", "build", "--spec", "kcspecs:specs", "--out", str(out),
                           *extra], cwd=proj, env=env, capture_output=True, text=True, timeout=HANG_S,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def roots(tmp_path_factory, keys) -> dict[str, Path]:
    """One project exported three times (signed by key a, by key b, unsigned): one compile."""
    base = tmp_path_factory.mktemp("signed")
    proj = make_project(base / "proj")
    (proj / "kcspecs.py").write_text(SPECS)
    out = {}
    for name, extra in (("a", ("--sign", str(keys["a"]))), ("b", ("--sign", str(keys["b"]))), ("unsigned", ())):
        got = _build(proj, base / name, base / "cache", *extra)
        assert got.returncode == 0, got.stdout + got.stderr
        out[name] = base / name
    out["proj"] = proj
    return out


@pytest.fixture
def served(kc_env, roots, tmp_path):
    """(a fresh copy of a root, load it in a subprocess with verify keys): the project the
    serving host builds from is the one exported (a refusal builds the right answer)."""

    def copy(name: str) -> Path:
        dst = tmp_path / f"root-{name}"
        shutil.copytree(roots[name], dst, symlinks=True)
        return dst

    def load(root: Path, pub: Path | None, **env: str) -> dict:
        if pub is not None:
            env["KERNELCACHE_PREBUILT_VERIFY_KEYS"] = str(pub)
        out = kc_env.run_py(LOAD.format(spec=spec_code(roots["proj"])), check=False, KERNELCACHE_PREBUILT=str(root),
                            **env)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"load failed ({out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}"
        return json.loads(lines[0][len("RESULT "):])

    return copy, load


def _entry(root: Path) -> Path:
    [m] = root.glob("v1/entries/*/*/*/manifest.json")
    return m.parent


def test_signed_root_is_served(kc_env, served, keys):
    copy, load = served
    root = copy("a")
    sig = json.loads((_entry(root) / "signature.json").read_text())
    assert sig["key_id"] == signing.load_signer(keys["a"]).key_id
    got = load(root, keys["a.pub"])
    assert got["status"] == "prebuilt" and got["value"] == 5 and got["prebuilt"] == [[True, ""]], got
    assert kc_env.compiles() == 0


def test_replaced_binary_is_refused(kc_env, served, keys):
    copy, load = served
    root = copy("a")
    so = next(_entry(root).glob("*.so"))
    data = bytearray(so.read_bytes())
    i = data.index(b"add")  # same size, other bytes
    data[i:i + 3] = b"xyz"
    replace_file(so, bytes(data))
    got = load(root, keys["a.pub"])
    assert got["status"] == "built" and got["value"] == 5, got
    [(usable, why)] = got["prebuilt"]
    assert not usable and "is not the binary key" in why and "sha256 differs" in why, why


def test_binary_and_manifest_swapped_together_is_refused(kc_env, served, keys, tmp_path):
    """The attack a root without signatures cannot see: an evil binary (adds 7) with the manifest's
    size and sha256 rewritten to match. Unsigned, it is served; signed, refused."""
    copy, load = served
    evil = make_project(tmp_path / "evil", offset=7)
    kc.load(project_spec(evil))
    [evil_entry] = kc_env.entries()
    evil_so = next(evil_entry.glob("*.so")).read_bytes()
    evil_identity = json.loads((evil_entry / "manifest.json").read_text())["identity"]
    shutil.rmtree(kc_env.cache)
    kc.reset_process_state()
    kc_env.reset_counts()

    def plant(root: Path) -> Path:
        entry = _entry(root)
        man = json.loads((entry / "manifest.json").read_text())
        replace_file(entry / man["so_name"], evil_so)
        man.update(so_sha256=hashlib.sha256(evil_so).hexdigest(), so_size=len(evil_so), identity=evil_identity)
        (entry / "manifest.json").write_text(json.dumps(man, sort_keys=True, separators=(",", ":")))
        (entry / "hit.rec").unlink(missing_ok=True)  # bound to the old manifest
        return root

    assert load(plant(copy("unsigned")), None)["value"] == 12  # the threat: served without signatures
    got = load(plant(copy("a")), keys["a.pub"])
    assert got["status"] == "built" and got["value"] == 5, got
    [(usable, why)] = got["prebuilt"]
    assert not usable and "manifest.json is not the one key" in why, why


def test_unsigned_root_is_refused(kc_env, served, keys):
    copy, load = served
    got = load(copy("unsigned"), keys["a.pub"])
    assert got["status"] == "built" and got["value"] == 5, got
    [(usable, why)] = got["prebuilt"]
    assert not usable and "unsigned entry (signature.json missing; KERNELCACHE_PREBUILT_VERIFY_KEYS is set)" in why


def test_root_signed_by_an_untrusted_key_is_refused(kc_env, served, keys):
    copy, load = served
    got = load(copy("b"), keys["a.pub"])
    assert got["status"] == "built" and got["value"] == 5, got
    [(usable, why)] = got["prebuilt"]
    kid = signing.load_signer(keys["b"]).key_id
    assert not usable and f"signed by unknown key {kid!r}" in why, why


def test_forged_signature_is_refused(kc_env, served, keys):
    copy, load = served
    root = copy("a")
    sig_path = _entry(root) / "signature.json"
    sig = json.loads(sig_path.read_text())
    other = json.loads((_entry(copy("b")) / "signature.json").read_text())
    sig["signature"] = other["signature"]  # b's signature, claimed as a's
    sig_path.write_text(json.dumps(sig))
    got = load(root, keys["a.pub"])
    [(usable, why)] = got["prebuilt"]
    assert got["value"] == 5 and not usable and "bad signature" in why, got


def test_pack_carries_the_signatures(kc_env, served, keys, tmp_path):
    """A companion wheel of a signed root, unpacked where the serving host imports from: served
    under the verify keys (its entry point found, its signature.json inside the wheel)."""
    copy, load = served
    root = copy("a")
    out = subprocess.run([sys.executable, "-m", "kernelcache", "pack", str(root), "--tag", "signedtest",
                          "--out", str(tmp_path / "dist")], env=kc_env.env(), capture_output=True, text=True,
                         timeout=HANG_S, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    whl = Path(out.stdout.strip().splitlines()[-1])
    site = tmp_path / "site"
    with zipfile.ZipFile(whl) as z:
        assert any(n.endswith("/signature.json") for n in z.namelist())
        z.extractall(site)
    env = kc_env.env()
    got = load(tmp_path / "no-such-root", keys["a.pub"], PYTHONPATH=f"{env['PYTHONPATH']}{os.pathsep}{site}")
    assert got["status"] == "prebuilt" and got["value"] == 5, got
    assert kc_env.compiles() == 0
