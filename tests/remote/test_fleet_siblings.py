"""Sibling entries of one source key (header edits keep the key: every PR build in readwrite CI
adds one) on a real store (a shared directory and SeaweedFS), issue 46.

- a compiler-less host finds the one matching entry behind nine newer siblings, and reports the
  siblings it refused first as one count on its hit line, not as nine misses;
- a host waiting on another host's compile lease, with siblings present, sleeps (one waiting
  line, a bounded number of requests) and fetches what the holder uploads: one compile in all.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from .hosts import Host, finish, make_project, without_compilers_path

VARIANTS = """
import sys, time
from pathlib import Path
import kernelcache as kc
root = Path(sys.argv[1])
spec = kc.KernelSpec(name="fleet_k", sources=["add.cc"], root=root, include_dirs=["include"],
                     functions={"add": "Callable[[int, int], int]"})
for i, text in enumerate(sys.argv[2:]):
    (root / "include" / "fleet_k.h").write_text(text)
    mod, res = kc.load_with_result(spec)
    assert res.status == "built", res
    if i == 0:
        time.sleep(1.1)  # the first entry is the oldest (S3 last-modified has one-second resolution)
print("BUILT", kc.stats()["uploads"])
"""

# the waiter's requests, counted by its own clients, written when it exits
COUNT_REQUESTS = """
import atexit, json, os
def _dump_requests():
    from kernelcache.lookup import fleet
    total = {}
    for rc in list(fleet._clients.values()):
        for k, v in rc.request_counts().items():
            total[k] = total.get(k, 0) + v
    with open(os.environ["KC_REQUESTS"], "w") as f:
        json.dump(total, f)
atexit.register(_dump_requests)
"""


def _env(remote, mode: str, **extra: str) -> dict:
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": mode, **extra})


def _publish_variants(remote, tmp_path, project, headers: list[str]) -> None:
    """A readwrite CI host builds and uploads one entry per header text, in this order."""
    ci = Host("ci", tmp_path / "host_ci", _env(remote, "readwrite"))
    p = subprocess.run([sys.executable, "-c", VARIANTS, str(project), *headers], env=ci.env(), capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and f"BUILT {len(headers)}" in p.stdout, p.stdout + p.stderr
    rc = remote.open("read")
    assert len([r for r in rc.all_entries() if r.name == "fleet_k"]) == len(headers)
    assert len({r.skey for r in rc.all_entries()}) == 1  # header edits keep the source key: siblings


def test_serving_host_finds_the_matching_entry_behind_nine_newer_siblings(fleet_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    main = (project / "include" / "fleet_k.h").read_text()
    prs = [f"#define FLEET_OFFSET {i} /* PR {i} */\n" for i in range(1, 10)]
    _publish_variants(fleet_remote, tmp_path, project, [main, *prs])  # main's entry is the oldest
    (project / "include" / "fleet_k.h").write_text(main)  # the serving host runs main
    serving = dict(PATH=without_compilers_path(), CXX="/bin/false", KERNELCACHE_NO_BUILD="1")
    b = Host("b", tmp_path / "host_b", _env(fleet_remote, "read", **serving))
    out = b.load(project)
    assert out.get("status") == "remote" and out["value"] == 5, out
    assert b.compiles() == 0 and b.events("build_start") == []
    hits = b.events("remote_hit")
    assert len(hits) == 1 and hits[0]["refused"] == 9, hits
    assert "differ" in hits[0]["refused_reason"], hits
    assert b.events("remote_miss") == [] and out["stats"]["remote_misses"] == 0  # a hit, not nine misses
    # what a user sees: one line for the fetch (with the count), no line per sibling
    c = Host("c", tmp_path / "host_c", _env(fleet_remote, "read", **serving))
    out, stderr = c.load_with_stderr(project, KERNELCACHE_LOG="")
    lines = [ln for ln in stderr.splitlines() if ln.startswith("[kernelcache]")]
    assert out["status"] == "remote", (out, stderr)
    assert [ln for ln in lines if "refused" in ln and "fetched" not in ln] == [], lines
    assert len([ln for ln in lines if "fetched fleet_k" in ln and "9 other entries" in ln]) == 1, lines


def test_a_waiter_on_the_lease_sleeps_then_fetches_with_siblings_present(fleet_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    _publish_variants(fleet_remote, tmp_path, project, [f"#define FLEET_OFFSET {i} /* old {i} */\n" for i in (1, 2)])
    (project / "include" / "fleet_k.h").write_text("#define FLEET_OFFSET 0 /* this change */\n")
    # two hosts race for the lease; the winner compiles slowly, the loser waits for its upload
    hosts = [Host(f"h{i}", tmp_path / f"host{i}", _env(fleet_remote, "readwrite", KC_SLOW_COMPILE="4",
                                                       KC_REQUESTS=str(tmp_path / f"requests{i}.json")))
             for i in range(2)]
    go = tmp_path / "go"
    before = COUNT_REQUESTS + f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
    procs = [h.start(project, before=before) for h in hosts]
    time.sleep(1.0)
    go.touch()
    outs = [finish(p, 300) for p in procs]
    assert sorted(o.get("status") for o in outs) == ["built", "remote"], outs
    assert all(o["value"] == 5 for o in outs)
    assert sum(h.compiles() for h in hosts) == 1  # one compile, one fetch
    waiter = hosts[[o["status"] for o in outs].index("remote")]
    w = int(waiter.name[1:])
    assert len(waiter.events("remote_lease_wait")) == 1, len(waiter.events("remote_lease_wait"))  # one line
    polls = len(waiter.events("remote_lease_wait_progress"))
    requests = json.loads((tmp_path / f"requests{w}.json").read_text())
    # each poll lists the entries and the lease (2 requests); the rest is a fixed handful: two
    # listings and three envelopes (two refused siblings, the holder's entry), the lease, a blob
    assert polls >= 1 and sum(requests.values()) <= 2 * polls + 20, (polls, requests)
    assert requests["get"] <= 8, requests  # each sibling's envelope read once, never per poll
    assert waiter.events("remote_miss") == []  # the siblings it refused first were not misses: it hit
