"""torch drop-in benchmark: ``kernelcache.cpp_extension`` vs ``torch.utils.cpp_extension``.

* warm (issue 24's acceptance): the extension is built; each side loads it in a fresh
  interpreter after ``import torch`` (not timed: both sides need it). Timed: the import of the
  module that provides ``load_inline``/``load`` and the call. Sides: ``torch``
  (``torch.utils.cpp_extension``), ``dropin`` (``kernelcache.cpp_extension``), ``install``
  (``kernelcache.cpp_extension.install()`` then torch's module, whose functions now route to the
  drop-in). torch re-hashes the sources, rewrites ``build.ninja`` and runs ninja (which stats
  every header); the drop-in recalls the call (``kernelcache.lookup.recall``: it re-stats what the last
  full load's answer rested on, without the loader) and imports the module. Sides alternate, N repetitions; medians, ratios, and the garbage
  collections each side's timed part set off (``gc.callbacks``: collections of generations
  0/1/2) are printed. Goals: import + call >= 5x faster than torch's, the call alone <= torch's,
  ``install`` not slower than torch.
* cold: each side builds the same extension into an empty cache / extensions dir in a fresh
  interpreter (import + call timed, build included), alternating; the ratio drop-in/torch is
  printed (goal: <= 1.05x). ``--cold-memo primed`` (default) gives each drop-in cold cache the
  per-installation memos (toolchain identities, torch's flag lines) that a cache which built any
  other extension before holds (copied from a seed cache that built a small pybind11 module of
  another name, not timed); ``fresh`` starts from nothing (the first build ever on a machine).

Not a test. ``--source extension`` (default) is ``load_inline`` of one function with torch's
implicit ``#include <torch/extension.h>`` (~5,400 recorded dependencies; ~40 s per compile on a
2-core machine); ``--source small`` is a one-function pybind11 module through ``load``.

    python benchmarks/bench_torch_ext.py [--warm-reps 9] [--cold-reps 0] [--source extension|small]
                                         [--cold-memo primed|fresh]
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
BASELINE: list[str] = []  # --baseline-repo: side "base" runs that checkout's drop-in
SOURCES = {
    "small": {"fn": "load", "text": "#include <pybind11/pybind11.h>\n"
                                    "int add(int a, int b) { return a + b; }\n"
                                    "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add\", &add); }\n"},
    "extension": {"fn": "load_inline",
                  "text": "torch::Tensor add(torch::Tensor a, torch::Tensor b) { return a + b; }\n"},
}
TIMED = """
import gc, json, sys, time
import torch
side, name, fn, arg = sys.argv[1:5]
counts = [0, 0, 0]
def _count(phase, info):
    if phase == "start":
        counts[info["generation"]] += 1
gc.callbacks.append(_count)
t0 = time.perf_counter()
if side == "torch":
    from torch.utils import cpp_extension as ce
elif side == "install":
    import kernelcache.cpp_extension
    kernelcache.cpp_extension.install()
    from torch.utils import cpp_extension as ce
else:
    from kernelcache import cpp_extension as ce
t1 = time.perf_counter()
if fn == "load":
    mod = ce.load(name, [arg])
else:
    mod = ce.load_inline(name, [arg], functions=["add"])
t2 = time.perf_counter()
gc.callbacks.remove(_count)
r = mod.add(torch.ones(1), torch.ones(1)) if fn == "load_inline" else mod.add(2, 3)
assert float(r if not hasattr(r, "sum") else r.sum()) in (2.0, 5.0)
print("RESULT " + json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "gc": counts}))
"""


def _run(side: str, env: dict, name: str, fn: str, arg: str) -> dict:
    if side == "base":  # the drop-in of another checkout (--baseline-repo): before/after in one run
        # its own copy of the cache (made after the drop-in built): two versions of the packed
        # hit record must not rewrite each other's between runs
        base_dir = env["KERNELCACHE_DIR"] + "-base"
        if not os.path.isdir(base_dir):
            shutil.copytree(env["KERNELCACHE_DIR"], base_dir, symlinks=True)
        env = {**env, "PYTHONPATH": BASELINE[0] + os.pathsep + env["PYTHONPATH"], "KERNELCACHE_DIR": base_dir}
        side = "dropin"
    p = subprocess.run([sys.executable, "-c", TIMED, side, name, fn, arg], env=env, capture_output=True,
                       text=True, timeout=1800, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{side} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def _env(work: Path, tag: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(KERNELCACHE_DIR=str(work / f"kc-{tag}"), KERNELCACHE_LOCK_DIR=str(work / f"locks-{tag}"),
               TORCH_EXTENSIONS_DIR=str(work / f"torch-{tag}"), KERNELCACHE_LOG="0",
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def _median(rows: list[dict], field: str) -> float:
    return statistics.median(r[field] if field != "total_s" else r["import_s"] + r["call_s"] for r in rows)


def _summary(data: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for side, rows in data.items():
        if rows:
            out[side] = {"import_ms": round(_median(rows, "import_s") * 1e3, 2),
                         "call_ms": round(_median(rows, "call_s") * 1e3, 2),
                         "total_ms": round(_median(rows, "total_s") * 1e3, 2),
                         "gc_collections": [sum(r["gc"][g] for r in rows) for g in range(3)],
                         "runs_with_full_gc": sum(1 for r in rows if r["gc"][2])}
            if all(r.get("compile_s") is not None for r in rows):  # cold: each run, and beyond the compile
                out[side]["runs_s"] = [round(r["import_s"] + r["call_s"], 2) for r in rows]
                out[side]["compile_s"] = [round(r["compile_s"], 2) for r in rows]
                out[side]["beyond_compile_s"] = round(statistics.median(
                    r["import_s"] + r["call_s"] - r["compile_s"] for r in rows), 3)
    t = out.get("torch")
    if t:
        for side in ("dropin", "install", "base"):
            if side in out:
                o = out[side]
                o["total_speedup_vs_torch"] = round(t["total_ms"] / o["total_ms"], 2)
                o["call_over_torch"] = round(o["call_ms"] / t["call_ms"], 3)
                o["total_over_torch"] = round(o["total_ms"] / t["total_ms"], 3)
    return out


def _compile_seconds(side: str, env: dict, name: str) -> float | None:
    """How long the compiler and linker ran in a cold run: ninja's log of torch's build dir
    (first start to last end), the drop-in manifest's ``build_seconds`` (ninja + recording the
    dependencies). What a cold run took beyond that is the side's own overhead; the compile
    itself swings by seconds with the machine's load."""
    try:
        if side == "torch":
            rows = [ln.split("\t") for ln in (Path(env["TORCH_EXTENSIONS_DIR"]) / name / ".ninja_log").read_text()
                    .splitlines() if ln and not ln.startswith("#")]
            return (max(int(r[1]) for r in rows) - min(int(r[0]) for r in rows)) / 1e3
        m = next((Path(env["KERNELCACHE_DIR"]) / "v1" / "entries" / name).glob("*/*/manifest.json"))
        return float(json.loads(m.read_text())["build_seconds"])
    except (OSError, StopIteration, ValueError, KeyError, IndexError):
        return None


def _seed_memos(work: Path) -> Path:
    """The memo dir of a cache that built another extension (a small pybind11 module), not timed."""
    src = work / "seed_ext.cpp"
    src.write_text(SOURCES["small"]["text"].replace("add", "seed"))
    env = _env(work, "seed")
    p = subprocess.run([sys.executable, "-c", "import torch, sys\nfrom kernelcache import cpp_extension as ce\n"
                        "ce.load('kc_bench_seed', [sys.argv[1]])", str(src)], env=env, capture_output=True,
                       text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"seed build failed:\n{p.stdout}\n{p.stderr}")
    return Path(env["KERNELCACHE_DIR"]) / "v1" / "toolchain"


def bench(warm_reps: int, cold_reps: int, source: str, sides: tuple[str, ...], cold_memo: str = "primed") -> dict:
    work = Path(tempfile.mkdtemp(prefix="kc-bench-torch-"))
    try:
        cfg = SOURCES[source]
        if cfg["fn"] == "load":
            src = work / "bench_ext.cpp"
            src.write_text(cfg["text"])
            arg = str(src)
        else:
            arg = cfg["text"]
        name = f"kc_bench_{source}"
        cold: dict[str, list[dict]] = {"torch": [], "dropin": []}
        memos = _seed_memos(work) if cold_reps and cold_memo == "primed" else None
        for i in range(cold_reps):
            env = _env(work, f"cold{i}")
            if memos is not None:
                shutil.copytree(memos, Path(env["KERNELCACHE_DIR"]) / "v1" / "toolchain")
            for side in ("torch", "dropin") if i % 2 == 0 else ("dropin", "torch"):
                row = _run(side, env, name, cfg["fn"], arg)
                row["compile_s"] = _compile_seconds(side, env, name)
                cold[side].append(row)
        warm_env = _env(work, "warm")
        for side in dict.fromkeys(("torch", "dropin", *sides)):  # build both once, warm the bytecode (not timed)
            _run(side, warm_env, name, cfg["fn"], arg)
        warm: dict[str, list[dict]] = {s: [] for s in sides}
        for i in range(warm_reps):
            for side in sides if i % 2 == 0 else tuple(reversed(sides)):
                warm[side].append(_run(side, warm_env, name, cfg["fn"], arg))
        out: dict = {"source": source, "warm_reps": warm_reps, "cold_reps": cold_reps, "cold_memo": cold_memo,
                     "load": os.getloadavg()[0]}
        if warm_reps:
            out["warm"] = _summary(warm)
        if cold_reps:
            c = _summary(cold)
            out["cold"] = c
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm-reps", type=int, default=9)
    ap.add_argument("--cold-reps", type=int, default=0)
    ap.add_argument("--source", choices=sorted(SOURCES), default="extension")
    ap.add_argument("--cold-memo", choices=("primed", "fresh"), default="primed",
                    help="drop-in cold caches: with the memos of a cache that built another extension, or empty")
    ap.add_argument("--sides", default="torch,dropin,install", help="warm sides, comma-separated")
    ap.add_argument("--baseline-repo", help="another checkout: adds side 'base' (its drop-in), e.g. /work/main")
    a = ap.parse_args()
    if a.baseline_repo:
        BASELINE.append(a.baseline_repo)
        a.sides += ",base"
    r = bench(a.warm_reps, a.cold_reps, a.source, tuple(a.sides.split(",")), a.cold_memo)
    print(json.dumps(r, indent=1))
    w = r.get("warm", {})
    if "torch" in w:
        t = w["torch"]
        for side in ("dropin", "install"):
            if side in w:
                o = w[side]
                print(f"warm, fresh process ({side}): import+call {o['total_ms']} ms vs torch {t['total_ms']} ms "
                      f"({o['total_speedup_vs_torch']}x faster; goal >= 5x for dropin, >= 1x for install); "
                      f"call alone {o['call_ms']} ms vs {t['call_ms']} ms ({o['call_over_torch']}x; goal <= 1x)")
    c = r.get("cold")
    if c and "torch" in c and "dropin" in c:
        print(f"cold build: drop-in {c['dropin']['total_ms'] / 1e3:.1f} s vs torch {c['torch']['total_ms'] / 1e3:.1f} s: "
              f"{c['dropin']['total_over_torch']}x (goal <= 1.05x)")
        if "beyond_compile_s" in c["dropin"] and "beyond_compile_s" in c["torch"]:
            print(f"cold, beyond the compile (median): drop-in {c['dropin']['beyond_compile_s']} s, "
                  f"torch {c['torch']['beyond_compile_s']} s")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
