"""Before vs after a change of kernelcache itself, in one run: the same first loads, alternating.

Why alternating: a refactor (issue 40's floors as folders) must leave what users feel unchanged,
and on a shared machine two benchmark runs minutes apart differ more than the change does. Each
repetition runs the BEFORE tree's process, then the AFTER tree's (the order flips every
repetition), each a fresh interpreter with that tree first on ``PYTHONPATH``. Both trees are
byte-compiled first: a fresh worktree has no ``.pyc`` files, and with ``PYTHONDONTWRITEBYTECODE``
set (as on this box) it would compile every module in every process while the other tree did not.

Rows (medians; ``load`` is timed inside the child after ``import tvm_ffi``, which imports torch
where it is installed and is the same library for both trees; ``cpu`` is the child's CPU time over
the same span, which a loaded machine disturbs less than wall time; ``process`` is the whole child):
  * warm recalled ``kc.load(spec)``: ``import kernelcache`` + a repeated load (the recall path);
  * warm full lookup: the same with ``KERNELCACHE_NO_RECALL=1`` (plan, key, hit record, admission);
  * warm tvm-ffi drop-in ``kernelcache.tvm_ffi.load_inline`` (recalled);
  * cold ``kc.load(spec)`` into an empty cache (a tiny C++ kernel: the compiler dominates).

    python benchmarks/bench_before_after.py [--before REV] [--after REV|WORKTREE] [--reps 15] [--cold-reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = """
#include <tvm/ffi/function.h>
int add(int a, int b) { return a + b; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""
INLINE = "int add(int a, int b) { return a + b; }\n"

CHILD = """
import json, os, sys, time
import tvm_ffi  # what both trees load through (and torch, which it imports), before the timer
t0, c0 = time.perf_counter(), time.process_time()
{body}
print(json.dumps({{"load": time.perf_counter() - t0, "cpu": time.process_time() - c0, "kernelcache": kernelcache.__file__}}))
"""
KC_LOAD = """
import kernelcache
spec = kernelcache.KernelSpec(name="ba_add", sources=["add.cc"], root=os.environ["BA_SRC"],
                              functions={"add": "Callable[[int, int], int]"})
assert kernelcache.load(spec).add(1, 2) == 3
"""
DROPIN = f"""
import kernelcache
import kernelcache.tvm_ffi as d
m = d.load_inline("ba_inline", cpp_sources={INLINE!r}, functions=["add"])
assert m.add(1, 2) == 3
"""


def tree(rev: str, work: Path) -> Path:
    """A checkout of ``rev`` (a worktree under ``work``), or the working tree itself for ``WORKTREE``."""
    if rev == "WORKTREE":
        return REPO
    dest = work / f"tree-{rev.replace('/', '_')}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(dest), rev], check=True)
    return dest


def child(root: Path, body: str, env: dict[str, str]) -> tuple[float, float, float]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
    e.update(env)
    e["PYTHONPATH"] = str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")
    t0 = __import__("time").perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD.format(body=body)], env=e, capture_output=True, text=True,
                       cwd=root, timeout=900)
    wall = __import__("time").perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"child failed in {root}:\n{p.stdout}\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["kernelcache"].startswith(str(root)), (out, root)  # the tree under test answered
    return out["load"], wall, out["cpu"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="HEAD~1")
    ap.add_argument("--after", default="WORKTREE")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cold-reps", type=int, default=3)
    ap.add_argument("--json", help="write the medians here")
    ns = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kc-before-after-"))
    src = work / "src"
    src.mkdir()
    (src / "add.cc").write_text(SOURCE)
    trees = {"before": tree(ns.before, work), "after": tree(ns.after, work)}
    for root in trees.values():  # byte-compiled, as pip leaves an installed wheel: where PYTHONDONTWRITEBYTECODE
        # is set, a tree without .pyc files compiles every module in every process (~0.5-2 ms each)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "kernelcache")], check=True)
    caches = {side: work / f"cache-{side}" for side in trees}
    env = {side: {"KERNELCACHE_DIR": str(caches[side]), "BA_SRC": str(src), "KERNELCACHE_LOG": "0"} for side in trees}
    rows: dict[str, dict[str, list[tuple[float, float, float]]]] = {}

    def measure(row: str, body: str, extra: dict[str, str], reps: int, fresh_cache: bool = False) -> None:
        got = rows.setdefault(row, {"before": [], "after": []})
        for i in range(reps):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for side in order:
                e = {**env[side], **extra}
                if fresh_cache:
                    e["KERNELCACHE_DIR"] = str(work / f"cold-{side}-{i}")
                got[side].append(child(trees[side], body, e))
            print(f"  {row} {i + 1}/{reps}", file=sys.stderr)

    for side in trees:  # populate both caches (and the recall memos: two loads each)
        for _ in range(2):
            child(trees[side], KC_LOAD, env[side])
            child(trees[side], DROPIN, env[side])
    measure("warm recalled kc.load", KC_LOAD, {}, ns.reps)
    measure("warm full lookup (NO_RECALL)", KC_LOAD, {"KERNELCACHE_NO_RECALL": "1"}, ns.reps)
    measure("warm tvm-ffi drop-in load_inline", DROPIN, {}, ns.reps)
    measure("cold kc.load (empty cache)", KC_LOAD, {}, ns.cold_reps, fresh_cache=True)

    print(f"\nbefore = {ns.before} ({trees['before']}), after = {ns.after} ({trees['after']}); medians")
    print(f"{'row':38} {'before load':>12} {'after load':>12} {'ratio':>7} {'before proc':>12} {'after proc':>12} "
          f"{'ratio':>7} {'before cpu':>11} {'after cpu':>11} {'ratio':>7}")
    out = {}
    for row, got in rows.items():
        b_load, a_load = (statistics.median(x[0] for x in got[s]) for s in ("before", "after"))
        b_proc, a_proc = (statistics.median(x[1] for x in got[s]) for s in ("before", "after"))
        b_cpu, a_cpu = (statistics.median(x[2] for x in got[s]) for s in ("before", "after"))
        unit, k = ("s", 1.0) if row.startswith("cold") else ("ms", 1000.0)
        print(f"{row:38} {b_load * k:9.1f} {unit:2} {a_load * k:9.1f} {unit:2} {a_load / b_load:6.3f}x "
              f"{b_proc * 1000:9.1f} ms {a_proc * 1000:9.1f} ms {a_proc / b_proc:6.3f}x "
              f"{b_cpu * 1000:8.1f} ms {a_cpu * 1000:8.1f} ms {a_cpu / b_cpu:6.3f}x")
        out[row] = {"before_load_s": b_load, "after_load_s": a_load, "before_process_s": b_proc,
                    "after_process_s": a_proc, "before_cpu_s": b_cpu, "after_cpu_s": a_cpu, "n": len(got["before"])}
    if ns.json:
        Path(ns.json).write_text(json.dumps(out, indent=1))
    for side, root in trees.items():
        if root != REPO:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(root)], check=False)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
