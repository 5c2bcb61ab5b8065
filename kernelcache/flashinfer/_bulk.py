"""FlashInfer's bulk prebuild (``flashinfer.jit.build_jit_specs``) through the route.

FlashInfer's tests (their ``warmup_jit`` fixtures, ``pytest_collection_modifyitems`` prebuilds)
and users who prebuild hand it a list of specs; FlashInfer writes every module's ninja file and
runs one ninja over all of them into its workspace. Left alone under the route, that builds
``.so`` files the routed ``build_and_load`` never loads (a second, unkeyed cache, half an hour
of nvcc for nothing), and FlashInfer's ``is_compiled``/library paths then name files that are
not the ones loaded. Routed, each spec takes the route's one path (:func:`._route.entry`): a hit
is the same hit a later ``build_and_load`` gets, a miss builds under the key's lock and is
published, so another process's ``build_and_load`` is a hit.

What stays FlashInfer's, as in its own: ``skip_prebuilt`` skips specs with an AOT artifact; a
list with a non-nvcc spec goes to FlashInfer (its ``TypeError``); ``FLASHINFER_DISABLE_JIT`` is
not read (FlashInfer's prebuild builds regardless). Specs the gate refuses go to FlashInfer's own
prebuild together, with one line each saying why.

Parallelism: FlashInfer runs one ninja with ``FLASHINFER_JIT_PREBUILD_MAX_JOBS`` (else
``MAX_JOBS``, else ninja's default) jobs; the route takes that, else the number of cores, and runs up to that many specs at once, splitting the jobs
between them, so the machine is no more loaded than FlashInfer's own prebuild loads it.
Every spec is tried; the first failure is raised afterwards (the others noted on it).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

from . import _gate, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


def total_jobs(s: "Settings") -> int:
    """How many compile jobs FlashInfer's prebuild would run at once here."""
    env = (os.environ.get("FLASHINFER_JIT_PREBUILD_MAX_JOBS") or "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return s.max_jobs or os.cpu_count() or 1


def prebuild(jit_specs: list[Any], s: "Settings") -> list[Any]:
    """Each spec through the route (hit, or one build under the key's lock); the results."""
    total = total_jobs(s)
    workers = max(1, min(len(jit_specs), total))
    per = s.replace(max_jobs=max(1, total // workers))
    outcomes: list[Any] = []

    def one(js: Any) -> Any:
        try:
            return _route.entry(js, per)[1]
        except Exception as e:  # noqa: BLE001 - every spec is tried; raised below
            return e

    if workers == 1:
        outcomes = [one(js) for js in jit_specs]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as ex:
            outcomes = list(ex.map(one, jit_specs))
    failed = [(js, o) for js, o in zip(jit_specs, outcomes) if isinstance(o, BaseException)]
    if failed:
        first = failed[0][1]
        if len(failed) > 1 and hasattr(first, "add_note"):  # Python >= 3.11
            for js, e in failed[1:]:
                first.add_note(f"also failed: {js.name}: {type(e).__name__}: {e}")
        raise first
    return outcomes


def make(original: Callable[[], Any], installed: Callable[[], bool], settings: Any) -> Any:
    """The replacement of ``build_jit_specs`` (``original()``: FlashInfer's own)."""
    from ..dropin.adapter import routed

    def build_jit_specs(specs: Any, verbose: bool = False, skip_prebuilt: bool = True) -> None:
        specs = list(specs)
        from flashinfer.jit.core import JitSpecNvcc

        if not installed() or not all(isinstance(js, JitSpecNvcc) for js in specs):
            return original()(specs, verbose=verbose, skip_prebuilt=skip_prebuilt)
        own: list[Any] = []
        ours: dict[str, Any] = {}
        for js in specs:
            if skip_prebuilt and js.aot_path.exists():
                continue
            why = _gate.refusal(js)
            if why:
                _gate.say(js.name, why)
                own.append(js)
            else:
                ours.setdefault(js.name, js)
        if own:
            original()(own, verbose=verbose, skip_prebuilt=skip_prebuilt)
        if ours:
            from ..dropin.call_settings import resolve

            prebuild(list(ours.values()), resolve(settings))
        return None

    return routed(build_jit_specs, None)
