"""Compile and link in a private directory; capture depfiles, logs and timings.

ninja runs the exact command lines of the plan (so what is keyed is what runs) in a fresh
directory on the cache's filesystem. Nothing here touches the published store: a failed or
killed build leaves only its private directory, which a later sweep removes.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from . import events, key, level1, toolchain
from .errors import BuildError
from .plan import IDENTITY_SYMBOL, BuildPlan

HEARTBEAT_S = 30.0
STOP_GRACE_S = 10.0  # how long ninja may take to stop its commands after SIGTERM


@dataclass
class BuildOutput:
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
    timings: dict = field(default_factory=dict)


def _ninja_escape(s: str) -> str:
    return s.replace("$", "$$").replace("\n", " ")


def _write_ninja(plan: BuildPlan, bdir: Path) -> None:
    b = str(bdir)
    lines = ["ninja_required_version = 1.3", "rule run", "  command = $cmd", "  description = $desc", ""]
    objs = []
    for step in plan.sources:
        argv = plan.compile_argv(step, b)
        out = os.path.join(b, step.obj)
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
    (bdir / "build.ninja").write_text("\n".join(lines))


def _failed_command(output: str) -> str:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1]
    return ""


def _run_ninja(plan: BuildPlan, bdir: Path, targets: list[str], log: list[str], jobs: int | None) -> None:
    with _ninja(plan, bdir, targets, log, jobs) as finish:
        finish()


@contextmanager
def _ninja(plan: BuildPlan, bdir: Path, targets: list[str], log: list[str], jobs: int | None
           ) -> Iterator[Callable[[], None]]:
    """ninja running in the background: the body may work meanwhile, then calls the yielded
    ``finish`` (wait, raise BuildError on failure). Leaving the body by an exception stops ninja
    and every compiler it started."""
    argv = [toolchain.find_ninja(), "-C", str(bdir)]
    if jobs:
        argv += ["-j", str(jobs)]
    argv += targets
    with _compiler_processes(argv) as proc:
        def finish() -> None:
            # Long CUDA builds take minutes: say so every HEARTBEAT_S instead of going silent.
            t0 = time.monotonic()
            while True:
                try:
                    stdout, _ = proc.communicate(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    events.emit(events.Event.BUILD_PROGRESS, name=plan.spec.name, seconds=time.monotonic() - t0)
            out = stdout or ""
            log.append(out)
            if proc.returncode != 0:
                raise BuildError(plan.spec.name, _failed_command(out) or shlex.join(argv), out, proc.returncode)

        yield finish
        if proc.returncode is None:
            finish()


class _Terminated(BaseException):
    """SIGTERM arrived during a build (raised by the handler installed for the build's duration)."""


@contextmanager
def _compiler_processes(argv: list[str]) -> Iterator[subprocess.Popen]:
    """Run ninja; an interrupted or failed wait stops ninja and every compiler it started.

    ninja runs each command in a process group of its own, so a signal to the Python process
    alone (``kill -INT <pid>``, a job runner's SIGTERM) reaches neither ninja nor ``cc1plus``:
    they would run on as orphans. On any exception here (KeyboardInterrupt included) ninja gets
    SIGTERM, which it forwards to each running command's group, then is waited for. SIGTERM
    itself kills Python without unwinding, so while a build runs in the main thread with the
    default SIGTERM action, a handler turns it into an exception; after the cleanup the process
    dies of SIGTERM as it would have.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    previous = _catch_sigterm()
    try:
        yield proc
    except BaseException as e:
        _stop(proc)
        if isinstance(e, _Terminated):
            _restore_sigterm(previous)
            previous = None
            os.kill(os.getpid(), signal.SIGTERM)  # the default action, now that nothing is left running
        raise
    finally:
        if previous is not None:
            _restore_sigterm(previous)


def _catch_sigterm() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None  # the application handles SIGTERM: its handler decides

        def raise_terminated(signum: int, frame: Any) -> None:
            raise _Terminated()

        signal.signal(signal.SIGTERM, raise_terminated)
        return signal.SIG_DFL
    except ValueError:  # not the main interpreter
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to ninja (it stops its commands' process groups), SIGKILL if it does not exit."""
    if proc.poll() is not None:
        return
    groups = _child_groups(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        for pgid in groups:  # ninja's commands, each the leader of its own group
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _child_groups(pid: int) -> list[int]:
    """Process groups led by ``pid``'s children (ninja's running commands), from /proc."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            if os.getpgid(int(k)) == int(k):
                out.append(int(k))
        except OSError:
            pass
    return out


def _prepare_record(plan: BuildPlan) -> None:
    """What recording the build will need, done while the compiler runs (waiting for ninja
    leaves this process's core idle): the record's modules imported, the installed packages'
    listings and the system packages' read. A warm-up only: a failure here is the record's to
    report, later."""
    try:
        from . import deprecord, installed, system_packages  # noqa: F401 - imported for the record step

        installed.prefetch(plan.include_dirs)
        system_packages.prefetch()
    except Exception:  # noqa: BLE001
        pass


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
        from . import deprecord

        deprecord.prepare([d["path"] for d in deps])  # the hit record's trusted packages, ahead
    except Exception:  # noqa: BLE001 - a warm-up only: writing the record reports its own failures
        pass
    return deps, absent, publishable, why


def run_build(plan: BuildPlan, l1: level1.Level1, bdir: Path, jobs: int | None = None) -> BuildOutput:
    """Build into ``bdir`` (a fresh private dir). Raises BuildError; leaves cleanup to the caller."""
    t_start = time.monotonic()
    wall0 = time.time_ns()
    log: list[str] = []
    # The identity is a per-build nonce compiled in alongside the sources (no extra serial
    # step); the manifest records it, so a .so that does not belong to its manifest is caught
    # right after dlopen.
    identity = uuid.uuid4().hex
    (bdir / "kc_identity.c").write_text(
        f'__attribute__((visibility("default"))) const char* {IDENTITY_SYMBOL}(void) '
        f'{{ return "{identity}"; }}\n'
    )
    _write_ninja(plan, bdir)
    beside = threading.Thread(target=_prepare_record, args=(plan,), name="kernelcache-prepare", daemon=True)
    beside.start()
    objects = [os.path.join(str(bdir), st.obj) for st in plan.sources] + [os.path.join(str(bdir), "kc_identity.o")]
    try:
        _run_ninja(plan, bdir, objects, log, jobs)
    finally:
        beside.join()
    t_compiled = time.monotonic()
    # The link runs while this process records what the compilers read (hashes, trusted
    # packages): the record needs only the depfiles, and the link leaves this core idle.
    with _ninja(plan, bdir, [os.path.join(str(bdir), plan.so_name)], log, jobs) as linked:
        deps, absent, publishable, why = _record(plan, l1, bdir, wall0)
        linked()
    eid = key.entry_id(l1.key, deps, absent)
    so = bdir / plan.so_name
    if not so.exists():
        raise BuildError(plan.spec.name, shlex.join(plan.link_argv(str(bdir))), "linker produced no output")
    digest = toolchain.sha256_file(so)
    size = so.stat().st_size
    # Keep only what an entry needs: the .so, logs; objects and depfiles go.
    for p in bdir.iterdir():
        if p.suffix in (".o", ".d") or p.name.endswith(".o.d") or p.name in (".ninja_log", ".ninja_deps"):
            p.unlink(missing_ok=True)
    text = "".join(log)
    (bdir / "build.log").write_text(text)
    return BuildOutput(
        dir=bdir, entry_id=eid, identity=identity, deps=deps, absent=absent, so_sha256=digest, so_size=size,
        seconds=time.monotonic() - t_start, log=text, publishable=publishable,
        not_publishable_reason=why, timings={"compile_s": round(t_compiled - t_start, 3)},
    )


def discard(bdir: Path) -> None:
    shutil.rmtree(bdir, ignore_errors=True)
