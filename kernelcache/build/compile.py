"""Compile and link in a private directory; capture depfiles, logs and timings.

ninja runs the exact command lines of the plan (so what is keyed is what runs) in a fresh
directory on the cache's filesystem. Nothing here touches the published store: a failed or
killed build leaves only its private directory, which a later sweep removes.
"""
from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
import uuid
from pathlib import Path

from ..base import events
from ..base.errors import BuildError, CacheWriteError, SpecError
from ..base.layout import path_problem
from ..base.records import FrozenRecord
from ..host import toolchain
from ..key import deps as key, level1
from ..key.plan import IDENTITY_SYMBOL, BuildPlan
from .ninja import ninja


class BuildOutput(FrozenRecord):
    """What one build made (a FrozenRecord: this module is imported on every cold build's
    critical path, and ``@dataclass`` costs ~1 ms of class creation there)."""

    dir: Path
    entry_id: str
    identity: str
    deps: list[dict]
    absent: list[str]
    so_sha256: str
    so_size: int
    seconds: float
    log: str
    publishable: bool = True
    not_publishable_reason: str = ""
    timings: dict | None = None


def _ninja_escape(s: str) -> str:
    return s.replace("$", "$$")


def _unbuildable(plan: BuildPlan, paths: list[str], args: list[str]) -> None:
    """A path or argument a build file cannot hold (a newline anywhere, "|" in a path of a build
    line) is refused before anything runs, naming it: ninja's own message would name neither it
    nor the kernel (and a newline in a command was silently made a space)."""
    for t in [*paths, *(a for a in args if "\n" in a or "\r" in a)]:
        problem = path_problem(t)
        if problem:
            raise SpecError(f"kernel {plan.spec.name!r}: cannot build {t!r}: {problem}")


def _write(plan: BuildPlan, path: Path, text: str) -> None:
    """Write one of the build's own files; a failure (disk full) names the kernel and the path."""
    try:
        path.write_text(text)
    except OSError as e:
        raise CacheWriteError(plan.spec.name, str(path), e) from e


def _write_ninja(plan: BuildPlan, bdir: Path) -> None:
    b = str(bdir)
    lines = ["ninja_required_version = 1.3", "rule run", "  command = $cmd", "  description = $desc", ""]
    objs = []
    for step in plan.sources:
        argv = plan.compile_argv(step, b)
        out = os.path.join(b, step.obj)
        _unbuildable(plan, [out, step.path], argv)
        objs.append(out)
        lines += [f"build {_ninja_escape(out).replace(':', '$:').replace(' ', '$ ')}: run "
                  f"{_ninja_escape(step.path).replace(':', '$:').replace(' ', '$ ')}",
                  f"  cmd = {_ninja_escape(shlex.join(argv))}", f"  desc = compile {step.rel}", ""]
    ident = os.path.join(b, "kc_identity.o")
    link_out = os.path.join(b, plan.so_name)
    esc = lambda p: _ninja_escape(p).replace(":", "$:").replace(" ", "$ ")  # noqa: E731
    lines += [f"build {esc(ident)}: run {esc(os.path.join(b, 'kc_identity.c'))}",
              f"  cmd = {_ninja_escape(shlex.join(plan.identity_argv(b)))}", "  desc = identity", ""]
    lines += [f"build {esc(link_out)}: run {' '.join(esc(o) for o in objs)} {esc(ident)}",
              f"  cmd = {_ninja_escape(shlex.join(plan.link_argv(b)))}", f"  desc = link {plan.so_name}", ""]
    lines += [f"default {esc(link_out)}", ""]
    _unbuildable(plan, [link_out], [*plan.identity_argv(b), *plan.link_argv(b)])
    _write(plan, bdir / "build.ninja", "\n".join(lines))


def _prepare_record(plan: BuildPlan) -> None:
    """What recording the build will need, done while the compiler runs (waiting for ninja
    leaves this process's core idle): the record's modules imported and the installed packages'
    listings read. A warm-up only: a failure here is the record's to report, later. At the
    lowest priority (Linux: per thread): on a machine with fewer free cores than compilers
    starting, the compilers go first. The system packages' listing is read by the record step,
    beside the linker: read here, it slowed the compiler sharing this core pair (~1%)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: the default priority
        pass
    try:
        from ..entry import deprecord  # noqa: F401 - imported for the record step
        from ..host import installed, system_packages  # noqa: F401 - imported for the record step

        installed.prefetch(plan.include_dirs)
    except Exception:  # noqa: BLE001
        pass


def identity_source(plan: BuildPlan, identity: str) -> str:
    """The identity object's C source: the nonce, and where a source exports tvm-ffi functions
    through the schema-export header, that header's C half (its text builder), so it is compiled
    on the core the sources leave free rather than in every exporting translation unit."""
    text = (f'__attribute__((visibility("default"))) const char* {IDENTITY_SYMBOL}(void) '
            f'{{ return "{identity}"; }}\n')
    if plan.schema_header and any(step.exports for step in plan.sources):
        quoted = plan.schema_header.replace("\\", "\\\\").replace('"', '\\"')
        text += f'#include "{quoted}"\n'
    return text


def _record(plan: BuildPlan, l1: level1.Level1, bdir: Path, wall0: int) -> tuple[list[dict], list[str], bool, str]:
    """What the compilers read (deps, absent probes) and whether the result may be published."""
    dep_paths: list[str] = []
    for step in plan.sources:
        try:
            dep_paths += key.parse_depfile((bdir / (step.obj + ".d")).read_text())
        except OSError as e:
            raise BuildError(plan.spec.name, "<depfile>", f"compiler wrote no depfile for {step.rel}: {e}") from e
    deps, absent = key.record_deps(plan, dep_paths, str(bdir))
    # Race guard: a dependency written while the compiler ran may not match what it read.
    publishable, why = True, ""
    if level1.source_hashes(plan.spec) != l1.source_hashes:
        publishable, why = False, "a source changed while it was being compiled"
    for d in deps:
        if d["stat"][2] >= wall0:  # ctime at or after the build started
            publishable, why = False, f"{d['path']} changed while it was being compiled"
            break
    try:
        from ..entry import deprecord  # noqa: F401 - imported for the record step

        deprecord.prepare([d["path"] for d in deps])  # the hit record's trusted packages, ahead
    except Exception:  # noqa: BLE001 - a warm-up only: writing the record reports its own failures
        pass
    return deps, absent, publishable, why


def run_build(plan: BuildPlan, l1: level1.Level1, bdir: Path, jobs: int | None = None) -> BuildOutput:
    """Build into ``bdir`` (a fresh private dir). Raises BuildError; leaves cleanup to the caller."""
    t_start = time.monotonic()
    wall0 = time.time_ns()
    # The identity is a per-build nonce compiled in alongside the sources (no extra serial
    # step); the manifest records it, so a .so that does not belong to its manifest is caught
    # right after dlopen.
    identity = uuid.uuid4().hex
    _write(plan, bdir / "kc_identity.c", identity_source(plan, identity))
    _write_ninja(plan, bdir)
    argv = [toolchain.find_ninja(), "-C", str(bdir)] + (["-j", str(jobs)] if jobs else [])

    def progress(seconds: float) -> None:
        events.emit(events.Event.BUILD_PROGRESS, name=plan.spec.name, seconds=seconds)

    # One ninja run; what the compilers read is recorded while the linker runs (the record
    # needs only the depfiles, and the link leaves this core idle).
    with ninja(argv, plan.spec.name, len(plan.sources) + 1, progress) as run:
        # started once ninja is: a thread holding the interpreter lock would delay its start
        beside = threading.Thread(target=_prepare_record, args=(plan,), name="kernelcache-prepare", daemon=True)
        beside.start()
        try:
            run.objects()
        finally:
            beside.join()
        t_compiled = time.monotonic()
        deps, absent, publishable, why = _record(plan, l1, bdir, wall0)
    eid = key.entry_id(l1.key, deps, absent)
    so = bdir / plan.so_name
    if not so.exists():
        raise BuildError(plan.spec.name, shlex.join(plan.link_argv(str(bdir))), "linker produced no output")
    threading.Thread(target=_flush, args=(so,), name="kernelcache-flush", daemon=True).start()
    digest = toolchain.sha256_file(so)
    size = so.stat().st_size
    # Keep only what an entry needs: the .so, logs; objects and depfiles go.
    for p in bdir.iterdir():
        if p.suffix in (".o", ".d") or p.name.endswith(".o.d") or p.name in (".ninja_log", ".ninja_deps"):
            p.unlink(missing_ok=True)
    text = run.output()
    _write(plan, bdir / "build.log", text)
    return BuildOutput(
        dir=bdir, entry_id=eid, identity=identity, deps=deps, absent=absent, so_sha256=digest, so_size=size,
        seconds=time.monotonic() - t_start, log=text, publishable=publishable,
        not_publishable_reason=why, timings={"compile_s": round(t_compiled - t_start, 3)},
    )


def _flush(path: Path) -> None:
    """Start writing the binary to disk while the entry is checked and its manifest written:
    publishing makes it durable before the rename (fsync again: cheap once this is done)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def discard(bdir: Path) -> None:
    shutil.rmtree(bdir, ignore_errors=True)
