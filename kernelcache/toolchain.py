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
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolchainError

# Environment variables that change what a compiler does without appearing on its command line.
# MAX_JOBS is deliberately absent: parallelism never changes the output.
ENV_ALLOWLIST = (
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "CUDAHOSTCXX",
    "KERNELCACHE_CACHE_BUSTER",
)

_memo_lock = threading.Lock()
_identity_memo: dict[tuple, dict] = {}
_file_hash_memo: dict[tuple, str] = {}


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_hash(path: str | os.PathLike) -> str:
    """Fast content hash of a dependency (xxh3-128): headers are re-hashed on every touch, and
    integrity (not adversaries) is what a dependency check guards against."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(path: str) -> tuple:
    st = os.stat(path)
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _disk_memo_dir() -> Path | None:
    from .config import cache_dir

    d = cache_dir() / "v1" / "toolchain"
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError:
        return None


def disk_memo(kind: str, skey: tuple, compute) -> dict:
    """Memoise ``compute()`` per process and on disk, keyed by a binary's stat."""
    with _memo_lock:
        hit = _identity_memo.get((kind, skey))
    if hit is not None:
        return hit
    name = hashlib.sha256(json.dumps([kind, *skey]).encode()).hexdigest()[:32]
    d = _disk_memo_dir()
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


def tool_identity(path: str) -> dict:
    """Identity of an executable: realpath, size, mtime and its `--version` banner."""
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

    return disk_memo("tool", skey, compute)


def file_identity(path: str) -> dict:
    """Content hash of a library we link against (libtvm_ffi.so), memoised by stat."""
    real = os.path.realpath(path)
    skey = _stat_key(real)
    return disk_memo("file", skey, lambda: {"path": real, "sha256": sha256_file(real)})


# -- compilers ------------------------------------------------------------------------------
def find_cxx() -> str:
    cxx = os.environ.get("CXX") or "c++"
    found = shutil.which(cxx)
    if not found:
        raise ToolchainError(
            f"C++ compiler {cxx!r} not found on PATH (set CXX, or install g++: apt-get install g++)"
        )
    return found


def _is_cuda_home(p: str | Path) -> bool:
    p = Path(p)
    return (p / "bin" / "nvcc").exists() and (p / "include" / "cuda_runtime.h").exists()


def find_cuda_home() -> str:
    """CUDA_HOME/CUDA_PATH, else the toolkit of the nvcc on PATH, else /usr/local/cuda.

    A candidate must hold both bin/nvcc and include/cuda_runtime.h: an nvcc wrapper script in
    /usr/local/bin must not make /usr/local look like a CUDA home.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(var)
        if v and _is_cuda_home(v):
            return os.path.realpath(v)
    nvcc = shutil.which("nvcc")
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


def find_ninja() -> str:
    """The ninja of the `ninja` wheel (a declared dependency), else the one on PATH."""
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
@dataclass(frozen=True)
class TvmFfiPaths:
    package_dir: str
    include_dir: str
    lib_path: str
    version: str


_tvm_paths: TvmFfiPaths | None = None


def tvm_ffi_paths() -> TvmFfiPaths:
    global _tvm_paths
    if _tvm_paths is None:
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
        skey = (*_stat_key(pkg), *_stat_key(lib), *_stat_key(os.path.dirname(pkg)))
        ver = disk_memo("tvm_ffi_version", skey, distribution_version)["version"]
        _tvm_paths = TvmFfiPaths(pkg, inc, lib, ver)
    return _tvm_paths


# -- CUDA target arch ----------------------------------------------------------------------
_arch_memo: dict[str, tuple[str, ...]] = {}


def _normalise_arch(token: str) -> str:
    t = token.strip().lower().replace("sm_", "").replace("compute_", "")
    if not t:
        raise ToolchainError("empty CUDA arch")
    if "." not in t:  # "90" / "90a" -> "9.0" / "9.0a"
        digits = "".join(c for c in t if c.isdigit())
        suffix = t[len(digits):]
        if len(digits) < 2:
            raise ToolchainError(f"cannot parse CUDA arch {token!r} (expected e.g. 9.0, 9.0a, sm_90)")
        t = f"{digits[:-1]}.{digits[-1]}{suffix}"
    major, _, minor = t.partition(".")
    if not major.isdigit() or not minor or not minor[0].isdigit():
        raise ToolchainError(f"cannot parse CUDA arch {token!r} (expected e.g. 9.0, 9.0a, sm_90)")
    return t


def parse_arch_list(value: str) -> tuple[str, ...]:
    toks = [t for t in value.replace(",", " ").replace(";", " ").split() if t]
    return tuple(sorted({_normalise_arch(t) for t in toks}))


def detect_gpu_archs(timeout: float = 10.0) -> tuple[str, ...]:
    """Compute capabilities of visible GPUs via nvidia-smi (no CUDA context; bounded wait)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(sorted({_normalise_arch(l) for l in out.stdout.split() if l.strip()}))


def cuda_archs() -> tuple[str, ...]:
    """Target archs: KERNELCACHE_CUDA_ARCH, then TVM_FFI_CUDA_ARCH_LIST, then the visible GPUs."""
    for var in ("KERNELCACHE_CUDA_ARCH", "TVM_FFI_CUDA_ARCH_LIST"):
        v = os.environ.get(var, "").strip()
        if v:
            return parse_arch_list(v)
    if "gpu" not in _arch_memo:
        _arch_memo["gpu"] = detect_gpu_archs()
    archs = _arch_memo["gpu"]
    if not archs:
        raise ToolchainError(
            "no CUDA target arch: set KERNELCACHE_CUDA_ARCH (e.g. 9.0) or TVM_FFI_CUDA_ARCH_LIST; "
            "no visible GPU was found to detect it from"
        )
    return archs


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    flags = []
    for a in archs:
        num = a.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
    return flags


def env_inputs() -> dict[str, str]:
    return {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
