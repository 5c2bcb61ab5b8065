"""Typed errors of the cache layer.

Each error carries the facts a user needs to act without re-running with more logging:
the failing command and compiler output, expected vs found schemas, the lock holder.
"""
from __future__ import annotations


class KernelCacheError(Exception):
    """Base class of every error raised by kernelcache."""


class BuildError(KernelCacheError, RuntimeError):
    """The compiler or linker failed; nothing was cached.

    Also a ``RuntimeError``: that is what ``tvm_ffi.cpp`` raises on a failed build, so code
    written against it (``except RuntimeError``) keeps catching failures when it builds through
    kernelcache's drop-in (``kernelcache.tvm_ffi``).
    """

    def __init__(self, spec_name: str, command: str, output: str, returncode: int | None = None):
        self.spec_name = spec_name
        self.command = command
        self.output = output
        self.returncode = returncode
        # No exit status / no "<placeholder>" command when no tool ran: the output is the cause.
        status = f" (exit {returncode})" if returncode is not None else ""
        # ninja's FAILED block already echoes the command: said once
        cmd = f"command: {command}\n" if command and not command.startswith("<") and command not in output else ""
        super().__init__(
            f"building kernel {spec_name!r} failed{status}.\n{cmd}--- compiler output ---\n{output.rstrip()}"
        )


class SchemaMismatch(KernelCacheError):
    """The exported functions of a built module differ from the spec's expected schema."""

    def __init__(self, spec_name: str, mismatches: dict[str, tuple[str | None, str | None]], where: str = ""):
        self.spec_name = spec_name
        self.mismatches = mismatches  # fn -> (expected or None if learned, found or None if missing)
        lines = [
            f"  {fn}: expected {exp if exp is not None else '<any>'}, found {found if found is not None else '<missing>'}"
            for fn, (exp, found) in sorted(mismatches.items())
        ]
        super().__init__(
            f"kernel {spec_name!r}{' (' + where + ')' if where else ''}: exported schema does not "
            "match the spec:\n" + "\n".join(lines)
        )


class CacheMissError(KernelCacheError):
    """A miss while building is disabled (KERNELCACHE_NO_BUILD=1 or --kc-no-build)."""

    def __init__(self, spec_name: str, reason: str, candidates: list[str] | None = None):
        self.spec_name = spec_name
        self.reason = reason
        self.candidates = candidates or []
        extra = "".join(f"\n  refused: {c}" for c in self.candidates)
        super().__init__(
            f"kernel {spec_name!r} is not in the cache and building is disabled "
            f"(KERNELCACHE_NO_BUILD): {reason}{extra}"
        )


class LockTimeout(KernelCacheError):
    """Waiting for another builder exceeded the configured deadline."""

    def __init__(self, spec_name: str, lock_path: str, waited_s: float, holder: str):
        self.spec_name = spec_name
        self.lock_path = lock_path
        self.waited_s = waited_s
        self.holder = holder
        super().__init__(
            f"kernel {spec_name!r}: gave up after {waited_s:.1f}s waiting for build lock "
            f"{lock_path} held by {holder} (KERNELCACHE_LOCK_TIMEOUT)"
        )


class UnknownKernel(KernelCacheError, LookupError):
    """A kernel name that is neither shipped nor declared (CLI, plugin, ``shipped_specs``)."""

    def __init__(self, name: str, known: list[str] | None = None):
        self.name = name
        self.known = sorted(known or [])
        hint = f"; known kernels: {', '.join(self.known)}" if self.known else ""
        super().__init__(f"unknown kernel {name!r}{hint}")


class SpecError(KernelCacheError, ValueError):
    """The KernelSpec itself is invalid (bad name, missing source, ...)."""


class ToolchainError(KernelCacheError):
    """A required tool or header set is missing; the message says what to install."""


def _strerror(err: OSError) -> str:
    import os

    return (err.strerror or (os.strerror(err.errno) if err.errno else "")) or str(err)


class CacheWriteError(KernelCacheError, OSError):
    """A build could not write its own files into the cache (disk full, quota, read-only):
    which kernel, which path, and the system's reason. Also an ``OSError`` with the original
    ``errno``, so ``except OSError`` callers still catch it."""

    def __init__(self, spec_name: str, path: str, err: OSError):
        self.spec_name = spec_name
        self.path = str(path)
        hint = " (the disk is full: free space there, or point KERNELCACHE_DIR elsewhere)" \
            if err.errno in (28, 122) else ""  # ENOSPC, EDQUOT
        super().__init__(f"kernel {spec_name!r}: cannot write {self.path} in the cache: {_strerror(err)}{hint}")
        self.errno = err.errno  # (strerror and filename unset: OSError's str() would replace the message)


class CacheRemovedError(KernelCacheError):
    """The cache directory was removed (``kernelcache clean``) while this kernel was being built
    in it; the loader builds once more in the cache as it is now, then raises this."""

    def __init__(self, spec_name: str, path: str):
        self.spec_name = spec_name
        self.path = str(path)
        super().__init__(f"kernel {spec_name!r}: the cache was removed while building ({self.path} is gone; "
                         "`kernelcache clean` or another process removed it)")


class RemovalError(KernelCacheError, OSError):
    """``prune`` or ``clean`` could not remove some paths: each path and why. ``done`` is what
    was removed anyway (a prune's evicted entries)."""

    def __init__(self, what: str, failed: list, done: list | None = None):
        self.failed = list(failed)  # [(path, OSError)]
        self.done = list(done or [])
        lines = [f"  {p}: {_strerror(e)}" for p, e in self.failed]
        super().__init__(f"{what}: {len(self.failed)} path(s) could not be removed:\n" + "\n".join(lines))
        self.errno = self.failed[0][1].errno if self.failed else None


class UnsafeDirectoryError(KernelCacheError, PermissionError):
    """A cache dir other users can write, refused under ``KERNELCACHE_STRICT_DIRS``."""


class UnsafeDirectoryWarning(UserWarning):
    """A cache dir or prebuilt root that other users can write: whatever they put there is
    loaded into this process."""


class LockViolation(KernelCacheError):
    """Locked serving (``KERNELCACHE_LOCK``) refused a load: the kernel is not in the lock, or an
    input or its key here differs from the locked one. Raised before any build step: nothing
    was compiled. ``drift``: one line per input that moved (``csrc/x.cuh changed``)."""

    def __init__(self, spec_name: str, drift: list[str], lock_path: str, also: list[str] | None = None):
        self.spec_name = spec_name
        self.drift = list(drift)
        self.lock_path = lock_path
        self.also = list(also or [])  # "kernel: what" of other kernels refused with it (preload)
        lines = [f"{spec_name}: {d}" for d in self.drift] + self.also
        super().__init__(f"kernel {spec_name!r} refused by the kernel lock {lock_path} (nothing was compiled):\n  "
                         + "\n  ".join(lines) + "\n(re-record the lock, or `kernelcache lock update`, "
                         "and review the change)")
