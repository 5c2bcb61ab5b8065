"""Toolchain discovery and identity fingerprints.

A cache key must change when the compiler, CUDA toolkit, target arch or linked ABI changes,
and must *not* change when the same tools are reached through another spelling (a symlink,
a moved venv with identical bytes). Identities are therefore built from realpaths, `--version`
output and binary stat, memoised per process and on disk keyed by the binary's stat, so a
warm load starts no subprocess.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from ..base import basis, process_state
from ..base.errors import ToolchainError
from ..base.records import FrozenRecord
from ..base.warm_facts import COMPILER_ENV

ENV_ALLOWLIST = COMPILER_ENV  # keyed (``env_inputs``); owned by warm_facts, which the recall digest reads too

_memo_lock = threading.Lock()
_identity_memo: dict[tuple, dict] = {}
# (kind, stat key) -> the thread computing it (``ahead``); taken by the first ``disk_memo`` asking
_pending: dict[tuple, threading.Thread] = {}


def _forget_identities() -> None:
    with _memo_lock:
        _identity_memo.clear()
        pending = list(_pending.values())
        _pending.clear()
    for t in pending:  # a computation started before the reset must not land after it
        t.join()
    with _memo_lock:
        _identity_memo.clear()


process_state.register("toolchain.identities", _forget_identities)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_hash(path: str | bytes | os.PathLike[str]) -> str:
    """Fast content hash of a dependency (xxh3-128): headers are re-hashed on every touch, and
    integrity (not adversaries) is what a dependency check guards against."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(path: str) -> tuple:
    """The memo key of a file by its stat; the stat is noted (the answer of a load rests on it)."""
    st = os.stat(path)
    basis.note(path, st)
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def stat_key(path: str) -> tuple:
    """The memo key of a binary: its path and stat (what ``disk_memo`` callers key by)."""
    return _stat_key(path)


def _usable_dir(d: Path | None) -> Path | None:
    if d is None:
        return None
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError:
        return None


def _memo_name(kind: str, skey: tuple) -> str:
    return hashlib.sha256(json.dumps([kind, *skey]).encode()).hexdigest()[:32]


def disk_memo(kind: str, skey: tuple, compute, memo_dir: Path | None = None) -> dict:
    """Memoise ``compute()`` per process and (given ``memo_dir``) on disk, keyed by a binary's stat.
    A computation started ahead (``ahead``) is waited for, not repeated."""
    with _memo_lock:
        hit = _identity_memo.get((kind, skey))
        pending = _pending.pop((kind, skey), None)
    if hit is not None:
        return hit
    if pending is not None:
        pending.join()
        with _memo_lock:
            hit = _identity_memo.get((kind, skey))
        if hit is not None:
            return hit
    return _disk_memo_now(kind, skey, compute, memo_dir)


def ahead(kind: str, skey: tuple, compute, memo_dir: Path | None) -> bool:
    """Start ``disk_memo(kind, skey, compute, memo_dir)`` in a thread where neither this process
    nor the disk has it (a fresh cache: a tool's ``--version``, a library's hash), so that it runs
    while this thread goes on: a subprocess's wait and hashing release the interpreter lock.
    Returns whether it started. A failure is left for ``disk_memo`` to meet again, in its caller."""
    if memo_dir is not None and os.path.exists(os.path.join(memo_dir, f"{_memo_name(kind, skey)}.json")):
        return False

    def run() -> None:
        try:
            _disk_memo_now(kind, skey, compute, memo_dir)
        except Exception:  # noqa: BLE001 - computed again, and raised, where it is asked for
            pass

    with _memo_lock:  # checked, registered and started at once: a thread that finds it can join it
        if (kind, skey) in _identity_memo or (kind, skey) in _pending:
            return False
        t = threading.Thread(target=run, name=f"kernelcache-{kind}", daemon=True)
        t.start()  # returns once the thread runs; ``run`` takes the lock only to store its result
        _pending[(kind, skey)] = t
    return True


def _disk_memo_now(kind: str, skey: tuple, compute, memo_dir: Path | None) -> dict:
    name = _memo_name(kind, skey)
    d = _usable_dir(memo_dir)
    value = None
    if d is not None:
        try:
            value = json.loads((d / f"{name}.json").read_text())
        except (OSError, ValueError):
            value = None
    if value is None:
        value = compute()
        if d is not None:
            tmp = d / f".{name}.{os.getpid()}.tmp"
            try:
                tmp.write_text(json.dumps(value))
                os.replace(tmp, d / f"{name}.json")
            except OSError:
                pass
    with _memo_lock:
        _identity_memo[(kind, skey)] = value
    return value


def _tool(path: str) -> tuple[tuple, object]:
    real = os.path.realpath(path)
    try:
        skey = _stat_key(real)
    except OSError as e:
        raise ToolchainError(f"tool {path!r} not found: {e}") from e

    def compute() -> dict:
        try:
            out = subprocess.run(
                [real, "--version"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
            )
            banner = (out.stdout + out.stderr).strip()
        except (OSError, subprocess.SubprocessError) as e:
            banner = f"<--version failed: {e}>"
        return {"path": real, "size": skey[1], "mtime_ns": skey[2], "version": banner}

    return skey, compute


def tool_identity(path: str, memo_dir: Path | None = None) -> dict:
    """Identity of an executable: realpath, size, mtime and its `--version` banner."""
    skey, compute = _tool(path)
    return disk_memo("tool", skey, compute, memo_dir)


def _file(path: str) -> tuple[tuple, object]:
    real = os.path.realpath(path)
    return _stat_key(real), lambda: {"path": real, "sha256": sha256_file(real)}


def file_identity(path: str, memo_dir: Path | None = None) -> dict:
    """Content hash of a library we link against (libtvm_ffi.so), memoised by stat."""
    skey, compute = _file(path)
    return disk_memo("file", skey, compute, memo_dir)


def computing_ahead() -> bool:
    """Is an identity being computed ahead (a fresh cache, where a build is likely)?"""
    with _memo_lock:
        return bool(_pending)


def identities_ahead(tools: list[str], files: list[str], memo_dir: Path | None) -> bool:
    """Start the identities of ``tools`` and ``files`` that are memoised nowhere yet, each in a
    thread (``ahead``); ``tool_identity``/``file_identity`` then take their results. Returns
    whether any started (a fresh cache: a build is likely). A path that cannot be stat-ed is
    left for the identity call to report."""
    started = False
    for kind, paths, make in (("tool", tools, _tool), ("file", files, _file)):
        for p in paths:
            try:
                skey, compute = make(p)
            except (OSError, ToolchainError):
                continue
            started = ahead(kind, skey, compute, memo_dir) or started
    return started


# -- compilers ------------------------------------------------------------------------------
def which(name: str) -> str | None:
    """``shutil.which``, its answer noted with what it rested on (``basis.note_which``)."""
    found = shutil.which(name)
    basis.note_which(name, found)
    return found


def find_cxx() -> str:
    cxx = os.environ.get("CXX") or "c++"
    found = which(cxx)
    if not found:
        raise ToolchainError(
            f"C++ compiler {cxx!r} not found on PATH (set CXX, or install g++: apt-get install g++)"
        )
    return found


def find_cc() -> str:
    """The C compiler for ``.c`` sources: CC, else cc."""
    cc = os.environ.get("CC") or "cc"
    found = which(cc)
    if not found:
        raise ToolchainError(f"C compiler {cc!r} not found on PATH (set CC, or install gcc: apt-get install gcc)")
    return found


def _is_cuda_home(p: str | Path) -> bool:
    p = Path(p)
    return basis.note_exists(p / "bin" / "nvcc") and basis.note_exists(p / "include" / "cuda_runtime.h")


def find_cuda_home() -> str:
    """CUDA_HOME/CUDA_PATH, else the toolkit of the nvcc on PATH, else /usr/local/cuda.

    A candidate must hold both bin/nvcc and include/cuda_runtime.h: an nvcc wrapper script in
    /usr/local/bin must not make /usr/local look like a CUDA home.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(var)
        if v and _is_cuda_home(v):
            return os.path.realpath(v)
    nvcc = which("nvcc")
    if nvcc:
        cand = Path(os.path.realpath(nvcc)).parent.parent
        if _is_cuda_home(cand):
            return str(cand)
    if _is_cuda_home("/usr/local/cuda"):
        return os.path.realpath("/usr/local/cuda")
    raise ToolchainError(
        "CUDA toolkit not found: set CUDA_HOME to a CUDA installation with bin/nvcc "
        "(e.g. CUDA_HOME=/usr/local/cuda), or put nvcc on PATH"
    )


def find_nvcc() -> str:
    return str(Path(find_cuda_home()) / "bin" / "nvcc")


def nvcc_major() -> str | None:
    """The CUDA major version the toolkit here links against (recorded for readers elsewhere)."""
    import re

    try:
        banner = tool_identity(find_nvcc())["version"]
    except ToolchainError:
        return None
    found = re.search(r"release (\d+)\.", banner)
    return found.group(1) if found else None


def find_ninja() -> str:
    """The ninja of the `ninja` wheel (a declared dependency), else the one on PATH.

    The interpreter's own scripts directory is looked at first: it is where the wheel puts its
    binary in a virtual environment, and asking ``sysconfig`` costs milliseconds a process."""
    cand = Path(sys.executable).parent / "ninja"
    if cand.exists():
        return str(cand)
    spec = importlib.util.find_spec("ninja")
    if spec and spec.submodule_search_locations:
        cand = Path(list(spec.submodule_search_locations)[0]) / "data" / "bin" / "ninja"
        if cand.exists():
            return str(cand)
    import sysconfig

    cand = Path(sysconfig.get_path("scripts")) / "ninja"
    if cand.exists():
        return str(cand)
    found = shutil.which("ninja")
    if not found:
        raise ToolchainError("ninja not found: pip install ninja")
    return found


# -- tvm-ffi (found without importing it: `import tvm_ffi` pulls in torch) ------------------
class TvmFfiPaths(FrozenRecord):
    """Where tvm-ffi is and which version (a record: eq, hash, repr, frozen)."""

    package_dir: str
    include_dir: str
    lib_path: str
    version: str


_tvm_paths: TvmFfiPaths | None = None
_tvm_seen: list[tuple[str, os.stat_result]] = []  # the stats its answer rests on (noted on every use)


def tvm_ffi_paths(memo_dir: Path | None = None) -> TvmFfiPaths:
    global _tvm_paths
    if _tvm_paths is not None:
        for path, st in _tvm_seen:
            basis.note(path, st)
    else:
        spec = importlib.util.find_spec("tvm_ffi")
        if spec is None or not spec.submodule_search_locations:
            raise ToolchainError("apache-tvm-ffi is not installed: pip install apache-tvm-ffi")
        pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
        inc = os.path.join(pkg, "include")
        lib = os.path.join(pkg, "lib", "libtvm_ffi.so")
        if not os.path.exists(os.path.join(inc, "tvm", "ffi", "function.h")) or not os.path.exists(lib):
            raise ToolchainError(f"apache-tvm-ffi at {pkg} lacks headers or libtvm_ffi.so; reinstall it")

        def distribution_version() -> dict:
            from importlib.metadata import PackageNotFoundError, version

            try:
                return {"version": version("apache-tvm-ffi")}
            except PackageNotFoundError:
                return {"version": "unknown"}

        # metadata lookups cost ~0.5 ms per process: memoise by the package dir and library stat
        seen = [(p, os.stat(p)) for p in (pkg, lib, os.path.dirname(pkg))]
        skey = tuple(x for p, st in seen for x in (p, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev))
        ver = disk_memo("tvm_ffi_version", skey, distribution_version, memo_dir)["version"]
        for path, st in seen:
            basis.note(path, st)
        _tvm_seen[:] = seen
        _tvm_paths = TvmFfiPaths(pkg, inc, lib, ver)
    return _tvm_paths


def _forget_tvm_ffi_paths() -> None:
    global _tvm_paths
    _tvm_paths = None
    _tvm_seen.clear()


process_state.register("toolchain.tvm_ffi_paths", _forget_tvm_ffi_paths)


def env_inputs() -> dict[str, str]:
    return {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
