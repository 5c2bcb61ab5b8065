"""events.py: counters (process and per kernel), miss reasons, and the log targets."""
from __future__ import annotations

import json
import threading

from kernelcache.base import events

import kernelcache as kc


def test_counters_per_process_and_per_kernel():
    kc.reset_process_state()
    events.emit("hit", name="a")
    events.emit("hit", name="a")
    events.emit("miss", name="b", reason_code="no_entry")
    events.emit("build_done", name="b", seconds=1.5)
    events.emit("lock_acquired", name="b", waited=0.25)
    events.emit("not_counted_per_kernel", name="b")
    s = kc.stats()
    assert (s["hits"], s["misses"], s["builds"]) == (2, 1, 1)
    assert s["miss_reasons"] == {"no_entry": 1}
    assert s["build_seconds"] == 1.5 and s["wait_seconds"] == 0.25
    assert s["kernels"]["a"] == {"hits": 2, "build_seconds": 0.0}
    assert s["kernels"]["b"] == {"misses": 1, "builds": 1, "build_seconds": 1.5, "reasons": {"misses:no_entry": 1}}
    kc.reset_process_state()
    assert kc.stats()["hits"] == 0 and kc.stats()["kernels"] == {}


def test_counting_is_exact_across_threads():
    kc.reset_process_state()

    def hits():
        for _ in range(500):
            events.emit("hit", name="t")

    with events.logging_to("0"):
        threads = [threading.Thread(target=hits) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert kc.stats()["hits"] == 4000 and kc.stats()["kernels"]["t"]["hits"] == 4000


def test_log_targets(tmp_path, capsys):
    log = tmp_path / "events.jsonl"
    with events.logging_to(str(log)):
        events.emit("build_start", name="k", reason="miss", n_sources=2)
    (rec,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert rec["event"] == "build_start" and rec["name"] == "k" and rec["n_sources"] == 2 and "pid" in rec
    with events.logging_to(None):  # default: progress lines only
        events.emit("build_start", name="k", reason="miss", n_sources=2)
        events.emit("hit", name="k")
    err = capsys.readouterr().err
    assert err == "[kernelcache] building k (miss): 2 source(s) ...\n"
    with events.logging_to("0"):
        events.emit("build_start", name="k")
    with events.logging_to("stderr"):
        events.emit("hit", name="k")
    err = capsys.readouterr().err
    assert json.loads(err)["event"] == "hit"


def test_unwritable_log_file_never_raises(tmp_path):
    with events.logging_to(str(tmp_path / "no" / "such" / "dir" / "log")):
        events.emit("hit", name="k")  # an event log must never break a load
