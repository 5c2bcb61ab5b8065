"""Settings: every knob of the loader in one frozen record, read from the environment here only.

Why a record instead of ``os.environ`` lookups at call time: a load has many inputs (cache dir,
lock dir, no-build, prebuilt roots, arch, remote ...). Passing them as one explicit value makes
``load(spec, settings=...)`` reproducible, lets the pytest plugin and ``kernelcache build`` steer
the loader without editing the process environment, and keeps tests free of env juggling.

This module is the ONLY reader of ``KERNELCACHE_*`` variables (enforced by a test). Code that
needs a variant calls :meth:`Settings.replace`; code that must hand settings to a subprocess
calls :meth:`Settings.to_env`.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from . import environ as raw_environ
from .patch_names import parse as parse_patch
from .records import FrozenRecord

if TYPE_CHECKING:
    from .layout import Layout

PREFIX = "KERNELCACHE_"
# Old name -> new name. The old one keeps working, with a DeprecationWarning.
DEPRECATED_ENV = {"KERNELCACHE_PREBUILD": "KERNELCACHE_WARM"}
REMOTE_MODES = ("read", "readwrite", "off")
LOCK_MODES = ("error", "warn")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(value: str | None, name: str) -> bool:
    v = (value or "").strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name} must be one of 1/0/true/false/yes/no/on/off, got {value!r}")


def _seconds(value: str | None, name: str, default: float) -> float:
    v = (value or "").strip()
    if not v:
        return default
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None


def _paths(value: str | None) -> tuple[Path, ...]:
    return tuple(Path(p).expanduser().resolve() for p in (value or "").split(os.pathsep) if p.strip())


def _positive(value: float, name: str, allow_zero: bool = False) -> float:
    v = float(value)
    if v < 0 or (v == 0 and not allow_zero) or v != v:
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} number of seconds, "
                         f"got {value!r}")
    return v


def default_mode(url: str | None, mode: str | None) -> str:
    """The one default-mode rule: a given mode wins; with a URL and no mode, ``read``; without a
    URL, ``off`` whatever the mode says (a mode alone shares nothing)."""
    m = (mode or "").strip().lower() or None
    if m is not None and m not in REMOTE_MODES:
        raise ValueError(f"KERNELCACHE_REMOTE_MODE must be one of {'|'.join(REMOTE_MODES)}, got {mode!r}")
    if not url:
        return "off"
    return m or "read"


class RemoteSettings(FrozenRecord):
    """The fleet cache's knobs, one record (``Settings.remote``).

    Why a record of its own: the URL, the mode and the rest belong together (a mode without a URL
    means nothing), and the rule that fills in the mode is stated once, here, for the
    environment, the CLI flags and the pytest options alike. Frozen and validated on
    construction: ``mode`` is always one of ``read|readwrite|off`` (``None`` asks for the default).
    """

    url: str | None = None  # s3://, gs://, az://, file:// (checked when the remote is opened)
    mode: str | None = None  # read | readwrite | off; None: read with a URL, else off
    signing_key: Path | None = None  # Ed25519 private key (PEM) for writers
    verify_keys: tuple[Path, ...] = ()  # Ed25519 public keys (PEM); set: unsigned refused
    timeout: float = 10.0  # seconds per remote operation
    lease_ttl: float = 600.0  # a compile lease older than this may be taken over
    wait: float = 900.0  # how long a host waits for another host's compile

    def __post_init__(self) -> None:
        url = (self.url or "").strip() or None
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "mode", default_mode(url, self.mode))
        if self.signing_key is not None:
            object.__setattr__(self, "signing_key", Path(self.signing_key))
        object.__setattr__(self, "verify_keys", tuple(Path(p) for p in self.verify_keys))
        object.__setattr__(self, "timeout", _positive(self.timeout, "KERNELCACHE_REMOTE_TIMEOUT"))
        object.__setattr__(self, "lease_ttl", _positive(self.lease_ttl, "KERNELCACHE_REMOTE_LEASE_TTL"))
        object.__setattr__(self, "wait", _positive(self.wait, "KERNELCACHE_REMOTE_WAIT", allow_zero=True))

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def writable(self) -> bool:
        return self.mode == "readwrite"

    @classmethod
    def from_env(cls, kc: Mapping[str, str], url: str | None = None, mode: str | None = None) -> "RemoteSettings":
        """From ``KERNELCACHE_REMOTE*`` (``kc``: see :func:`kc_environ`), with ``url``/``mode``
        given on a command line or in an ini layered on top *before* the default rule."""
        g = kc.get
        signing = (g("KERNELCACHE_REMOTE_SIGNING_KEY") or "").strip()
        return cls(
            url=url or (g("KERNELCACHE_REMOTE") or "").strip() or None,
            mode=mode or (g("KERNELCACHE_REMOTE_MODE") or "").strip() or None,
            signing_key=Path(signing).expanduser() if signing else None,
            verify_keys=_paths(g("KERNELCACHE_REMOTE_VERIFY_KEYS")),
            timeout=_seconds(g("KERNELCACHE_REMOTE_TIMEOUT"), "KERNELCACHE_REMOTE_TIMEOUT", 10.0),
            lease_ttl=_seconds(g("KERNELCACHE_REMOTE_LEASE_TTL"), "KERNELCACHE_REMOTE_LEASE_TTL", 600.0),
            wait=_seconds(g("KERNELCACHE_REMOTE_WAIT"), "KERNELCACHE_REMOTE_WAIT", 900.0),
        )

    def to_env(self) -> dict[str, str]:
        out = {"KERNELCACHE_REMOTE_MODE": str(self.mode), "KERNELCACHE_REMOTE_TIMEOUT": repr(self.timeout),
               "KERNELCACHE_REMOTE_LEASE_TTL": repr(self.lease_ttl), "KERNELCACHE_REMOTE_WAIT": repr(self.wait),
               "KERNELCACHE_REMOTE_VERIFY_KEYS": os.pathsep.join(map(str, self.verify_keys))}
        if self.url is not None:
            out["KERNELCACHE_REMOTE"] = self.url
        if self.signing_key is not None:
            out["KERNELCACHE_REMOTE_SIGNING_KEY"] = str(self.signing_key)
        return out

    # the flat record of the wire (xdist workerinput, the JSON report): the names users know
    _WIRE = {"url": "remote", "mode": "remote_mode", "signing_key": "remote_signing_key",
             "verify_keys": "remote_verify_keys", "timeout": "remote_timeout", "lease_ttl": "remote_lease_ttl",
             "wait": "remote_wait"}

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f, key in self._WIRE.items():
            v = getattr(self, f)
            out[key] = str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "RemoteSettings":
        values: dict[str, Any] = {f: (tuple(data[key]) if f == "verify_keys" else data[key])
                                  for f, key in cls._WIRE.items() if key in data}
        return cls(**values)


def kc_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``KERNELCACHE_*`` variable, deprecated names mapped to their new ones (with a warning).

    The pytest plugin resolves its own options from this dict, so no other module reads the
    environment for ``KERNELCACHE_*`` names.
    """
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k.startswith(PREFIX)}
    for old, new in DEPRECATED_ENV.items():
        if old in out:
            value = out.pop(old)
            warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)
            out.setdefault(new, value)
    return out


class Settings(FrozenRecord):
    """What a load may do and where it keeps things. Frozen: derive variants with ``replace``."""

    cache_dir: Path
    lock_dir: Path
    lock_timeout: float = 1800.0  # seconds to wait for another builder; <= 0: forever
    no_build: bool = False  # a miss raises CacheMissError instead of compiling
    rebuild: bool = False  # ignore cached entries, build once
    log: str | None = None  # None: progress lines; "0": silent; "1"/"stderr": JSON events; else a file
    prebuilt: tuple[Path, ...] = ()  # read-only artifact roots searched before the cache
    cuda_arch: str | None = None  # "9.0" / "8.0,9.0"; None: the visible GPUs
    flashinfer_include: str | None = None
    max_jobs: int | None = None  # compile parallelism (never part of the key)
    remote: RemoteSettings = RemoteSettings()  # the fleet cache (off by default)
    patch: tuple[str, ...] = ()  # drop-ins to patch in (kernelcache.base.patch_names: tvm_ffi, torch, flashinfer)
    cache_buster: str | None = None  # any string: part of every key (force a fleet-wide rebuild)
    # stat every recorded header on a warm load, those of installed packages too (default: an
    # installed, non-editable distribution's headers are trusted through its RECORD's identity)
    verify_installed: bool = False
    # the kernel lock (kernelcache.lockfile): served under (a kernel it lacks or that drifted is
    # refused before any build step; lock_mode "warn": logged, and loaded anyway), recorded into
    lock: Path | None = None
    lock_mode: str = "error"  # error | warn
    lock_record: Path | None = None
    # Ed25519 public keys (PEM or ssh-ed25519 lines, the fleet's format): set, a prebuilt root's entry
    # is served only when its signature.json (``kernelcache build --sign``) verifies with one of them
    prebuilt_verify_keys: tuple[Path, ...] = ()
    # a cache dir others can write is an error, a prebuilt root others can write is skipped (default: a warning)
    strict_dirs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache_dir", Path(os.path.abspath(Path(self.cache_dir).expanduser())))
        from .layout import path_problem

        unbuildable = path_problem(str(self.cache_dir))  # said now, not as a ninja error in every build
        if unbuildable:
            raise ValueError(f"cache dir (KERNELCACHE_DIR) {str(self.cache_dir)!r} cannot be built in: {unbuildable}; "
                             "choose a directory without it")
        object.__setattr__(self, "lock_dir", Path(os.path.abspath(Path(self.lock_dir).expanduser())))
        object.__setattr__(self, "prebuilt", tuple(Path(p) for p in self.prebuilt))
        object.__setattr__(self, "prebuilt_verify_keys", tuple(Path(p) for p in self.prebuilt_verify_keys))
        if not isinstance(self.remote, RemoteSettings):
            raise TypeError(f"Settings.remote must be a RemoteSettings, got {type(self.remote).__name__}")
        object.__setattr__(self, "patch", parse_patch(self.patch, "patch"))
        for f in ("lock", "lock_record"):
            v = getattr(self, f)
            object.__setattr__(self, f, None if v is None or str(v) == "" else Path(os.path.abspath(Path(v).expanduser())))
        if self.lock_mode not in LOCK_MODES:
            raise ValueError(f"KERNELCACHE_LOCK_MODE must be one of {'|'.join(LOCK_MODES)}, got {self.lock_mode!r}")

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, remote_url: str | None = None,
                 remote_mode: str | None = None, **overrides: Any) -> "Settings":
        """Read ``KERNELCACHE_*`` (and the few standard variables kernelcache honours).

        ``remote_url`` / ``remote_mode`` (a command line's or an ini's) are layered over the
        environment's before :class:`RemoteSettings` applies its default-mode rule; any other
        field can be overridden by keyword.
        """
        env = os.environ if environ is None else environ
        kc = kc_environ(env)
        g = kc.get
        cache = Path(raw_environ.cache_dir({**kc, **{k: env[k] for k in ("XDG_CACHE_HOME",) if k in env}}))
        lock = (Path(g("KERNELCACHE_LOCK_DIR", "")).expanduser() if g("KERNELCACHE_LOCK_DIR")
                else default_lock_dir())
        jobs = (env.get("MAX_JOBS") or "").strip()
        values: dict[str, Any] = dict(
            cache_dir=cache,
            lock_dir=lock,
            lock_timeout=_seconds(g("KERNELCACHE_LOCK_TIMEOUT"), "KERNELCACHE_LOCK_TIMEOUT", 1800.0),
            no_build=_flag(g("KERNELCACHE_NO_BUILD"), "KERNELCACHE_NO_BUILD"),
            rebuild=_flag(g("KERNELCACHE_REBUILD"), "KERNELCACHE_REBUILD"),
            log=g("KERNELCACHE_LOG"),
            prebuilt=_paths(g("KERNELCACHE_PREBUILT")),
            cuda_arch=(g("KERNELCACHE_CUDA_ARCH") or "").strip() or (env.get("TVM_FFI_CUDA_ARCH_LIST") or "").strip()
            or None,
            flashinfer_include=(g("KERNELCACHE_FLASHINFER_INCLUDE") or "").strip() or None,
            max_jobs=int(jobs) if jobs.isdigit() and int(jobs) > 0 else None,
            remote=RemoteSettings.from_env(kc, remote_url, remote_mode),
            patch=parse_patch(g("KERNELCACHE_PATCH"), "KERNELCACHE_PATCH")
            + (("tvm_ffi",) if _flag(g("KERNELCACHE_PATCH_TVM_FFI"), "KERNELCACHE_PATCH_TVM_FFI") else ()),
            cache_buster=g("KERNELCACHE_CACHE_BUSTER") or None,
            verify_installed=_flag(g("KERNELCACHE_VERIFY_INSTALLED"), "KERNELCACHE_VERIFY_INSTALLED"),
            lock=(g("KERNELCACHE_LOCK") or "").strip() or None,
            lock_mode=(g("KERNELCACHE_LOCK_MODE") or "").strip().lower() or "error",
            lock_record=(g("KERNELCACHE_LOCK_RECORD") or "").strip() or None,
            prebuilt_verify_keys=_paths(g("KERNELCACHE_PREBUILT_VERIFY_KEYS")),
            strict_dirs=_flag(g("KERNELCACHE_STRICT_DIRS"), "KERNELCACHE_STRICT_DIRS"),
        )
        if overrides.pop("patch_tvm_ffi", False):  # the old name's option (--kc-patch-tvm-ffi)
            overrides["patch"] = (*parse_patch(overrides.get("patch", values["patch"]), "patch"), "tvm_ffi")
        values.update(overrides)
        return cls(**values)

    # -- export ------------------------------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        """The ``KERNELCACHE_*`` variables that reproduce these settings in a subprocess."""
        out = {
            "KERNELCACHE_DIR": str(self.cache_dir),
            "KERNELCACHE_LOCK_DIR": str(self.lock_dir),
            "KERNELCACHE_LOCK_TIMEOUT": repr(self.lock_timeout),
            "KERNELCACHE_NO_BUILD": "1" if self.no_build else "0",
            "KERNELCACHE_REBUILD": "1" if self.rebuild else "0",
            "KERNELCACHE_PREBUILT": os.pathsep.join(map(str, self.prebuilt)),
            "KERNELCACHE_PATCH": ",".join(self.patch),
            "KERNELCACHE_PATCH_TVM_FFI": "1" if self.patch_tvm_ffi else "0",
            "KERNELCACHE_VERIFY_INSTALLED": "1" if self.verify_installed else "0",
            "KERNELCACHE_LOCK_MODE": self.lock_mode,
            "KERNELCACHE_PREBUILT_VERIFY_KEYS": os.pathsep.join(map(str, self.prebuilt_verify_keys)),
            "KERNELCACHE_STRICT_DIRS": "1" if self.strict_dirs else "0",
        }
        for name, value in (("KERNELCACHE_LOG", self.log), ("KERNELCACHE_CUDA_ARCH", self.cuda_arch),
                            ("KERNELCACHE_FLASHINFER_INCLUDE", self.flashinfer_include),
                            ("KERNELCACHE_CACHE_BUSTER", self.cache_buster),
                            ("KERNELCACHE_LOCK", None if self.lock is None else str(self.lock)),
                            ("KERNELCACHE_LOCK_RECORD", None if self.lock_record is None else str(self.lock_record))):
            if value is not None:
                out[name] = value
        out.update(self.remote.to_env())
        return out

    def to_wire(self) -> dict[str, Any]:
        """These settings as plain data (str, float, bool, None, lists): pytest-xdist's
        ``workerinput`` and the JSON report. The remote's fields keep their flat names
        (``remote``, ``remote_mode`` ...)."""
        out: dict[str, Any] = {}
        for f in self._FIELDS:
            v = getattr(self, f)
            if isinstance(v, RemoteSettings):
                out.update(v.to_wire())
            elif isinstance(v, Path):
                out[f] = str(v)
            elif isinstance(v, tuple):
                out[f] = [str(p) for p in v]
            else:
                out[f] = v
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "Settings":
        """The inverse of :meth:`to_wire` (unknown keys ignored: a newer controller's extras)."""
        names = set(cls._FIELDS) - {"remote"}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
        values["remote"] = RemoteSettings.from_wire(data)
        return cls(**values)

    # -- derived -----------------------------------------------------------------------------
    @property
    def layout(self) -> "Layout":
        """The paths of this cache dir (``kernelcache.base.layout`` owns them)."""
        from .layout import Layout

        return Layout(self.cache_dir)

    @property
    def layout_root(self) -> Path:
        """Where the versioned cache layout lives (entries, tmp, quarantine, memo)."""
        return self.layout.root

    @property
    def memo_dir(self) -> Path:
        """On-disk memo of tool identities (keyed by the binaries' stat)."""
        return self.layout.memo

    @property
    def patch_tvm_ffi(self) -> bool:
        """Is ``tvm_ffi.cpp`` routed through kernelcache (``KERNELCACHE_PATCH`` names ``tvm_ffi``)?"""
        return "tvm_ffi" in self.patch

    @property
    def remote_enabled(self) -> bool:
        """Shortcut for ``self.remote.enabled``."""
        return self.remote.enabled

    @property
    def remote_writable(self) -> bool:
        """Shortcut for ``self.remote.writable``."""
        return self.remote.writable


def patch_requested(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The drop-ins ``KERNELCACHE_PATCH`` / ``KERNELCACHE_PATCH_TVM_FFI`` ask for; cheap, never raising.

    ``import kernelcache`` and the ``.pth`` hook ask this on every start: a bad value arms nothing
    here and is reported by :meth:`Settings.from_env` when a load reads the settings.
    """
    env = os.environ if environ is None else environ
    try:
        out = parse_patch(env.get("KERNELCACHE_PATCH") or "")
    except ValueError:
        out = ()
    if (env.get("KERNELCACHE_PATCH_TVM_FFI") or "").strip().lower() in _TRUE and "tvm_ffi" not in out:
        out = ("tvm_ffi", *out)
    return out


def default_lock_dir() -> Path:
    """Node-local: flock is only meaningful on the local kernel, never on NFS."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"kernelcache-{os.getuid()}" / "locks"


def resolve(settings: Settings | None) -> Settings:
    """The settings a public call runs with: the given ones, else the environment's now."""
    return settings if settings is not None else Settings.from_env()
