"""Drop-in entries are ordinary kernelcache entries: ``kernelcache ls/verify/prune`` see them,
``explain`` says why a header edit misses, a replaced binary is refused before import and rebuilt,
and an exported artifact root serves them (status ``prebuilt``) to a cache that never built them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .helpers import PARAM_V1, PARAM_V2, SEED_NAME, write_seed

LOAD = r"""
import json, sys
import torch
from kernelcache import cpp_extension
import kernelcache as kc
spec = cpp_extension.make_spec({name!r}, [{src!r}])
mod, res = kc.load_with_result(spec)
print("RESULT " + json.dumps({{"status": res.status, "reason": res.reason, "version": mod.version(),
    "window": getattr(mod.Param(), "min_match_window_size", None), "so": res.so_path,
    "entry": res.entry_path, "stats": kc.stats()}}))
"""


def _load(kc, src: Path, **env: str) -> dict:
    p = subprocess.run([sys.executable, "-c", LOAD.format(name=SEED_NAME, src=str(src))], env=kc.env(**env),
                       capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"load failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def _cli(kc, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelcache", *args], env=kc.env(**env), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_ls_verify_and_a_replaced_binary_is_refused_and_rebuilt(torch_env):
    old = _load(torch_env, write_seed(torch_env.tmp / "old", PARAM_V1))
    src = write_seed(torch_env.tmp / "pkg", PARAM_V2)
    new = _load(torch_env, src)
    assert (old["version"], new["version"], new["window"]) == (1, 2, 4) and torch_env.compiles() == 2
    listed = json.loads(_cli(torch_env, "ls", "--json").stdout)
    assert sorted(i["entry_id"] for i in listed if i["name"] == SEED_NAME) == sorted(
        Path(r["entry"]).name for r in (old, new))
    manifest = json.loads((Path(new["entry"]) / "manifest.json").read_text())
    assert manifest["kind"] == "torch_python" and "min_match_window_size" in manifest["surface"]["classes"]["Param"]
    assert _cli(torch_env, "verify").returncode == 0
    # A deploy copies the older build over this entry's binary: valid ELF, valid module, wrong bytes.
    so = Path(new["so"])
    tmp = so.with_name(so.name + ".tmp")
    tmp.write_bytes(Path(old["so"]).read_bytes())
    os.replace(tmp, so)
    bad = _cli(torch_env, "verify")
    assert bad.returncode == 1 and "BAD" in bad.stdout
    again = _load(torch_env, src)
    assert again["status"] == "built" and again["version"] == 2 and again["window"] == 4
    assert torch_env.compiles() == 3  # refused before import, rebuilt once
    assert list((torch_env.cache / "v1" / "quarantine").iterdir())


def test_explain_names_the_header_and_an_artifact_root_serves_another_cache(torch_env):
    from kernelcache.entry.manifest import read
    from kernelcache.export.roots import export_entry

    import kernelcache as kc
    from kernelcache import cpp_extension
    from kernelcache.storage.entry import Entry

    src = write_seed(torch_env.tmp / "pkg", PARAM_V1)
    built = _load(torch_env, src)
    (src.parent / "param.h").write_text(PARAM_V2)
    info = kc.explain(cpp_extension.make_spec(SEED_NAME, [str(src)]))
    assert info["status"] != "hit" and "param.h" in (info["reason"] or "")
    (src.parent / "param.h").write_text(PARAM_V1)
    root = torch_env.tmp / "artifacts"
    export_entry(Entry(Path(built["entry"]), read(Path(built["entry"]))), root, None)
    served = _load(torch_env, src, KERNELCACHE_DIR=str(torch_env.tmp / "fresh-cache"), KERNELCACHE_PREBUILT=str(root))
    assert served["status"] == "prebuilt" and served["version"] == 1 and served["so"].startswith(str(root))
    assert torch_env.compiles() == 1
    pruned = _cli(torch_env, "prune", "--max-age", "0")
    assert pruned.returncode == 0 and f"evicted {SEED_NAME}" in pruned.stdout
