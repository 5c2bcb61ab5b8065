"""Acceptance 2 and 6: concurrent cold loads compile once; loaders never see a partial entry."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from tests.support import HANG_S, spec_code


def _spawn(kc_env, code: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=kc_env.env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_eight_cold_processes_compile_exactly_once(kc_env, project):
    code = spec_code(project) + textwrap.dedent("""
        import kernelcache.lookup.loader as L
        mod, res = L.load_with_result(spec)
        print(mod.add(20, 22), res.entry_id, res.status)
    """)
    procs = [_spawn(kc_env, code, KC_SLOW_COMPILE="1") for _ in range(8)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err
        outs.append(out.split())
    assert kc_env.compiles() == 1, kc_env.count_log.read_text()
    assert kc_env.compiles("link") == 1
    assert {o[0] for o in outs} == {"42"}
    assert len({o[1] for o in outs}) == 1  # every process loaded the same entry
    assert sorted(o[2] for o in outs).count("built") == 1
    assert len(kc_env.entries("adder")) == 1


HOLD_LOCK = """
    import time
    from pathlib import Path
    import kernelcache as kc
    from kernelcache import kinds
    from kernelcache.key import level1
    from kernelcache.build.lock import single_flight
    from tests.support import project_spec
    s = kc.Settings.from_env()
    l1 = level1.level1(kinds.make_plan(project_spec(Path({project!r})), s), s)
    with single_flight(l1.key, "adder", s):
        print("held", flush=True)
        time.sleep(300)
"""


def test_waiter_loads_what_the_holder_published_without_taking_the_lock(kc_env, project):
    """Waiters for one build load its entry as soon as it is published, side by side: none
    queues for the lock the builder still holds (its upload, say) to load a finished entry."""
    import kernelcache as kc
    from tests.support import project_spec

    kc.load(project_spec(project))
    [entry] = kc_env.entries("adder")
    aside = kc_env.tmp / "aside"
    entry.rename(aside)  # not built yet, as far as anyone can see
    holder = _spawn(kc_env, HOLD_LOCK.format(project=str(project)))  # a builder that never finishes
    log = kc_env.tmp / "events.jsonl"
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = _spawn(kc_env, spec_code(project) + textwrap.dedent("""
            import kernelcache.lookup.loader as L
            mod, res = L.load_with_result(spec)
            print(mod.add(2, 3), res.status, "|", res.reason)
        """), KERNELCACHE_LOG=str(log), KERNELCACHE_LOCK_TIMEOUT="60")
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline and waiter.poll() is None and \
                not (log.exists() and '"lock_wait_start"' in log.read_text()):
            time.sleep(0.05)
        aside.rename(entry)  # the builder's publish: one rename
        out, err = waiter.communicate(timeout=HANG_S)
        assert waiter.returncode == 0, err
        assert out.split()[:2] == ["5", "hit"] and "built by another process" in out, out
        seen = [json.loads(line)["event"] for line in log.read_text().splitlines()]
        assert "lock_wait_start" in seen and "lock_wait_published" in seen, seen
        assert "lock_acquired" not in seen, seen
        assert holder.poll() is None  # the lock was still held throughout
        assert kc_env.compiles() == 1  # the one build before the test's waiting began
    finally:
        for p in (holder, waiter):
            if p is not None:
                p.kill()
                p.communicate(timeout=HANG_S)


def test_loaders_racing_a_builder_never_see_a_partial_entry(kc_env, project):
    done = kc_env.tmp / "builder-exited"
    builder = _spawn(kc_env, spec_code(project) + "print(kc.load(spec).add(1, 1))", KC_SLOW_LINK="2")
    # Readers poll until they load; once the builder has exited (``done``), a miss is a bug.
    poll = spec_code(project) + textwrap.dedent(f"""
        import time
        seen = []
        while True:
            finished = Path({str(done)!r}).exists()
            try:
                seen.append(kc.load(spec).add(1, 1))
                break
            except kc.CacheMissError:
                if finished:
                    raise
                seen.append("miss")
                time.sleep(0.02)
        print(seen[-1], len(seen))
    """)
    readers = [_spawn(kc_env, poll, KERNELCACHE_NO_BUILD="1") for _ in range(3)]
    out, err = builder.communicate(timeout=HANG_S)
    done.touch()
    assert builder.returncode == 0 and out.strip() == "2", err
    for r in readers:
        rout, rerr = r.communicate(timeout=HANG_S)
        assert r.returncode == 0, rerr  # any partial file would surface as a load/validation error
        last, n = rout.split()
        assert last == "2" and int(n) >= 1
    assert kc_env.compiles() == 1


def test_edit_and_reload_in_one_process_runs_new_code(kc_env, project):
    import kernelcache as kc
    from tests.support import project_spec

    m1 = kc.load(project_spec(project))
    assert m1.add(1, 1) == 2
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 1000\n")
    m2 = kc.load(project_spec(project))
    assert m2 is not m1 and m2.add(1, 1) == 1002
    assert m1.add(1, 1) == 2  # the old module stays valid while referenced
    assert kc.load(project_spec(project)) is m2  # same object on repeat calls
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 0\n")
    kc_env.reset_counts()
    builds = kc.stats()["builds"]
    assert kc.load(project_spec(project)) is m1  # flipping back hits the first entry, no rebuild
    assert kc_env.compiles() == 0 and kc.stats()["builds"] == builds and kc.stats()["lock_waits"] == 0
