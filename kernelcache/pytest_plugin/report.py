"""The report: header, terminal summary table, ``--kc-report-json``, GitHub step summary.

Why one module builds all of them: they show the same rows (one per kernel: warm result, uses
by tests, and the loader's per-kernel counters merged across xdist workers), so a kernel loaded
only inside a test — e.g. a third-party ``load_inline`` kernel through the drop-in — appears in
every one of them, not only the declared kernels. Remote columns (fleet cache) appear only when
some kernel has a non-zero value, to keep the table narrow on runs without a remote.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from kernelcache.base.events import Status

from .gating import describe
from .settings_bridge import to_wire
from .xdist import merge_counts

if TYPE_CHECKING:  # pragma: no cover
    from .state import SessionState

REPORT_FORMAT = 1
_REASON_MAX = 160


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": sys.version.split()[0], "pytest": pytest.__version__}
    for dist, key in (("kernelcache", "kernelcache"), ("apache-tvm-ffi", "tvm_ffi"), ("pytest-xdist", "xdist")):
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = None
    return out


def header_lines(st: "SessionState") -> list[str]:
    v = versions()
    shown = ", ".join(f"{d}={st.opt(d)}" for d in ("warm", "no_build", "rebuild") if st.opt(d) or d == "warm")
    if st.settings.remote_enabled:
        shown += f", remote={st.settings.remote.url} ({st.settings.remote.mode})"
    lines = [f"kernelcache {v['kernelcache']}: cache {st.settings.cache_dir}, arch {st.arch_text}, {shown}",
             f"kernelcache: GPUs: {describe(st.hw)}; tvm-ffi {v['tvm_ffi']}"]
    results = st.kernels.results
    if results:
        parts = [f"{r['name']} {r['status']} {r['seconds']:.1f}s" for r in results.values()]
        lines.append(f"kernelcache: warmed {len(results)} kernel(s) in {st.kernels.warm_seconds:.1f}s: "
                     + ", ".join(parts))
    elif st.declared:
        lines.append(f"kernelcache: declared kernels: {', '.join(st.declared)}")
    return lines


# -- the rows ----------------------------------------------------------------------------------
def total_stats(st: "SessionState") -> dict:
    from kernelcache.base import events

    return merge_counts([events.stats()] + [o.get("stats") or {} for o in st.worker_out.values()])


def _merged_uses(st: "SessionState") -> dict[str, Counter]:
    total: dict[str, Counter] = {n: Counter(c) for n, c in st.kernels.uses.items()}
    for out in st.worker_out.values():
        for n, c in (out.get("uses") or {}).items():
            total.setdefault(n, Counter()).update(c)
    return total


def _derived_status(k: dict) -> Status:
    """Status of a kernel the plugin never loaded itself (only the loader's counters know it)."""
    for counter, status in (("builds", Status.BUILT), ("remote_hits", Status.REMOTE), ("hits", Status.HIT),
                            ("prebuilt_hits", Status.PREBUILT)):
        if k.get(counter):
            return status
    return Status.FAILED


def kind_label(stats: dict) -> str:
    """The kind's report label ("torch extension" for kernels of the torch drop-in; "" for
    tvm-ffi modules), from the ``kind:<name>`` counters the events record."""
    from kernelcache import kinds

    labels = sorted({kinds.label(k.split(":", 1)[1]) for k, v in (stats or {}).items() if k.startswith("kind:") and v})
    return ", ".join(label for label in labels if label)


def kernel_rows(st: "SessionState", total: dict | None = None) -> list[dict]:
    """One row per kernel: warmed ones, ones tests loaded, ones only the counters saw."""
    rows = _kernel_rows(st, total)
    for r in rows:
        r["label"] = kind_label(r["stats"])
    return rows


def _miss_codes(k: dict) -> str:
    """The local misses of a kernel by the miss event's code (``no_entry``, ...), from its counters."""
    return ", ".join(c.split(":", 1)[1] for c in (k.get("reasons") or {}) if c.startswith("misses:"))


def _kernel_rows(st: "SessionState", total: dict | None = None) -> list[dict]:
    per = (total if total is not None else total_stats(st)).get("kernels") or {}
    uses = _merged_uses(st)
    rows = []
    for n, r in st.kernels.results.items():
        row = {**r, "uses": dict(uses.get(n, Counter())), "stats": per.get(n, {})}
        codes = _miss_codes(row["stats"]) if r["status"] == Status.BUILT else ""
        if codes:  # one word for a miss in every row: the code, then the loader's words for it
            row["reason"] = f"miss: {codes}" + (f" ({r['reason']})" if r.get("reason") else "")
        rows.append(row)
    seen = set(st.kernels.results)
    for n in list(uses) + list(per):
        if n in seen:
            continue
        seen.add(n)
        k = per.get(n, {})
        status = "not warmed" if n in uses and not k else _derived_status(k)
        # a local miss explains a build (or its failure); a fetched or prebuilt answer is no miss
        reasons = _miss_codes(k) if status in (Status.BUILT, Status.FAILED) else ""
        rows.append({"name": n, "status": str(status), "seconds": float(k.get("build_seconds", 0.0)),
                     "reason": f"miss: {reasons}" if reasons else "", "where": "test", "entry_id": "",
                     "entry_path": "", "uses": dict(uses.get(n, Counter())), "stats": k})
    return rows


def _count_with_reasons(counter: str) -> Callable[[dict], str]:
    def cell(r: dict) -> str:
        k = r["stats"]
        n = int(k.get(counter, 0))
        codes = [f"{c.split(':', 1)[1]}:{v}" for c, v in (k.get("reasons") or {}).items()
                 if c.startswith(counter + ":")]
        return f"{n} ({','.join(codes)})" if n and codes else str(n)
    return cell


def _count(counter: str) -> Callable[[dict], str]:
    return lambda r: str(int(r["stats"].get(counter, 0)))


# (header, cell, right-aligned, always shown)
_COLUMNS: list[tuple[str, Callable[[dict], str], bool, bool]] = [
    ("kernel", lambda r: r["name"] + (f" [{r['label']}]" if r.get("label") else ""), False, True),
    ("status", lambda r: r["status"], False, True),
    ("seconds", lambda r: f"{r['seconds']:.2f}", True, True),
    ("where", lambda r: r.get("where") or "", False, True),
    ("uses", lambda r: str(r["uses"].get("test", 0)), True, True),
    ("hits", _count("hits"), True, True),
    ("builds", _count("builds"), True, True),
    ("prebuilt", _count("prebuilt_hits"), True, False),
    ("remote hits", _count("remote_hits"), True, False),
    ("remote misses", _count_with_reasons("remote_misses"), False, False),
    ("uploads", _count("uploads"), True, False),
    ("lease waits", _count("lease_waits"), True, False),
    ("remote errors", _count_with_reasons("remote_errors"), False, False),
]


def table(rows: list[dict]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Headers, cells and right-alignment; optional columns only when some row is non-zero."""
    cols = [c for c in _COLUMNS if c[3] or any(c[1](r) not in ("0", "") for r in rows)]
    headers = [c[0] for c in cols] + ["reason"]
    cells = []
    for r in rows:
        reason = first_line(r.get("reason") or "")
        if len(reason) > _REASON_MAX:
            reason = reason[:_REASON_MAX - 3] + "..."
        cells.append([c[1](r) for c in cols] + [reason])
    return headers, cells, [c[2] for c in cols] + [False]


def totals_line(st: "SessionState", rows: list[dict], total: dict) -> str:
    line = (f"totals: {len(rows)} kernel(s); builds {total.get('builds', 0)} "
            f"({total.get('build_seconds', 0):.1f}s compiling), hits {total.get('hits', 0)}, "
            f"misses {total.get('misses', 0)}")
    for key, label in (("remote_hits", "remote hits"), ("remote_misses", "remote misses"),
                       ("uploads", "uploads"), ("lease_waits", "lease waits"), ("remote_errors", "remote errors"),
                       ("compiles_after_ready", "compiles after ready")):
        if total.get(key):
            line += f", {label} {total[key]}"
    n_workers = len(st.worker_out)
    return line + (f"; {n_workers} xdist worker(s)" if n_workers else "")


def _context_line(st: "SessionState") -> str:
    return f"cache: {st.settings.cache_dir}   arch: {st.arch_text}   GPUs: {describe(st.hw)}"


# -- terminal -------------------------------------------------------------------------------------
def write_terminal(tr: Any, st: "SessionState") -> None:
    total = total_stats(st)
    rows = kernel_rows(st, total)
    tr.write_sep("=", "kernelcache")
    tr.write_line(_context_line(st))
    if not rows:
        tr.write_line("no kernels declared or used")
    else:
        headers, cells, right = table(rows)
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        widths[-1] = 0

        def fmt(values: list[str]) -> str:
            return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

        tr.write_line(fmt(headers))
        for r, c in zip(rows, cells):
            tr.write_line(fmt(c), **({"red": True} if r["status"] == Status.FAILED else {}))
        tr.write_line(totals_line(st, rows, total))
    for r in rows:
        reason = (r.get("reason") or "").strip()
        if r["status"] == Status.FAILED and "\n" in reason:  # the one full copy; tests reference it
            tr.write_sep("-", f"kernelcache: kernel {r['name']!r} failed")
            for line in reason.splitlines():
                tr.write_line(line)
    for f in st.policy_failures:
        tr.write_line(f"kernelcache: FAILED: {f}", red=True)
    if st.opt("report_json"):
        tr.write_line(f"kernelcache: report written to {st.opt('report_json')}")


# -- GitHub step summary --------------------------------------------------------------------------
def _md(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown(st: "SessionState") -> str:
    total = total_stats(st)
    rows = kernel_rows(st, total)
    out = ["### kernelcache", "", f"cache `{st.settings.cache_dir}` · arch {st.arch_text} · GPUs: "
           f"{_md(describe(st.hw))}", ""]
    if rows:
        headers, cells, right = table(rows)
        out.append("| " + " | ".join(headers) + " |")
        out.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
        out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in cells]
        out += ["", totals_line(st, rows, total)]
    else:
        out.append("no kernels declared or used")
    out += ["", *[f"**FAILED**: {_md(f)}" for f in st.policy_failures]]
    rep = ((st.impact or {}).get("selection") or {}).get("report")
    if rep:  # --kc-affected-mode=report: what selection would have skipped, and whether it mattered
        out += ["", f"test impact (report mode): {_md(rep['line'])}", *[f"- would have missed `{n}`" for n in rep["failed"]]]
    return "\n".join(out).rstrip() + "\n\n"


def write_step_summary(st: "SessionState") -> None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` (a GitHub Actions variable) when set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown(st))
    except OSError as e:  # a summary must never fail the run
        tr = st.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"kernelcache: cannot write GITHUB_STEP_SUMMARY {path}: {e}", yellow=True)


# -- JSON -----------------------------------------------------------------------------------------
def write_json(st: "SessionState", session: pytest.Session, exitstatus: int) -> None:
    path = st.opt("report_json")
    if not path:
        return
    total = total_stats(st)
    from kernelcache.base import events

    counts = Counter(t["outcome"] for t in st.tests.values() if t["outcome"])
    data = {
        "format": REPORT_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "session": {
            "versions": versions(),
            "args": [str(a) for a in session.config.invocation_params.args],
            "rootdir": str(session.config.rootpath),
            "exitstatus": int(exitstatus),
            "duration_s": round(time.time() - st.t0, 3),
            "workers": sorted(st.worker_out),
            "cache_dir": str(st.settings.cache_dir),
            "cuda_arch": st.settings.cuda_arch,
            "gpus": st.hw,
            "options": {d: {"value": v, "source": s} for d, (v, s) in st.opts.items()},
            "settings": to_wire(st.settings),
            "build_only": bool(st.opt("build_only")),
            "policy_failures": st.policy_failures,
        },
        "kernels": kernel_rows(st, total),
        "stats": {"controller": events.stats(),
                  "workers": {w: o.get("stats") for w, o in sorted(st.worker_out.items())},
                  "total": total},
        "summary": dict(sorted(counts.items())),
        "tests": list(st.tests.values()),
    }
    if st.impact is not None:
        data["impact"] = st.impact
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, p)


def first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""
