"""``file://`` backend: a directory on a shared filesystem (NFS, Lustre, CephFS ...), stdlib only.

Shared-filesystem rules (what the field's bug reports teach, see the fleet-cache survey):
- publish = unique temp file in the *target* directory + fsync + ``os.link`` onto the final name:
  atomic, never replaces; EEXIST means another host won. An NFS reply lost and retransmitted can
  report EEXIST for our own link, so the temp file's link count decides (2 = ours).
- nothing is built, linked or dlopen'ed on the share; readers copy into local staging.
- no ``flock`` across hosts (leases are create-if-absent objects, like on object stores).
- ENOENT / ESTALE / ENOTDIR = the object is missing (a miss), any other OSError = the remote is
  unavailable (marked down by the client).
- a hung mount must not hang a load: every call runs in a helper thread and is abandoned after
  the per-operation deadline (the thread stays blocked in the kernel; the load goes on locally).
"""
from __future__ import annotations

import builtins
import errno
import os
import shutil
import socket
import stat as stat_mod
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from ...base import bounded
from ..entry import fsync_dir
from .backend import ObjectInfo, RemoteCorrupt, RemoteMissing, RemoteUnavailable

CHUNK = 1 << 20
TMP_PREFIX = ".tmp-"
_MISSING = (errno.ENOENT, errno.ESTALE, errno.ENOTDIR)


class FileBackend:
    def __init__(self, root: Path, timeout: float = 10.0):
        self.root = Path(root)
        self.timeout = max(0.1, float(timeout))
        self.description = f"file://{self.root}"

    # -- helpers -----------------------------------------------------------------------------
    def _bounded(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        box: dict[str, Any] = {}
        done = threading.Event()
        handover = threading.Lock()

        def run() -> None:
            try:
                value = fn(*args)
            except BaseException as e:  # handed to the caller below
                box["error"] = e
            else:
                with handover:
                    if box.get("abandoned"):  # the caller gave up: nobody else will close it
                        close = getattr(value, "close", None)
                        if close is not None:
                            close()
                        return
                    box["value"] = value
            finally:
                done.set()

        threading.Thread(target=run, name="kernelcache-remote-file", daemon=True).start()
        if not done.wait(self.timeout):
            with handover:
                if "value" not in box and "error" not in box:
                    box["abandoned"] = True
                    raise RemoteUnavailable(f"{self.description}: {what} did not finish within "
                                            f"{self.timeout:g}s (hung or very slow filesystem)")
        if "error" in box:
            err = box["error"]
            if isinstance(err, OSError):
                raise self._translate(err, what) from None
            raise err
        return box.get("value")

    def _translate(self, err: OSError, what: str) -> Exception:
        msg = f"{self.description}: {what}: {err.strerror or err}"
        if err.errno in _MISSING:
            return RemoteMissing(msg)
        return RemoteUnavailable(msg)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"bad remote key {key!r}")
        return self.root.joinpath(*parts)

    def _check_root(self) -> None:
        try:
            st = os.stat(self.root)
        except OSError as e:
            raise RemoteUnavailable(f"{self.description}: remote directory unreachable: {e.strerror or e}") from None
        if not stat_mod.S_ISDIR(st.st_mode):
            raise RemoteUnavailable(f"{self.description}: not a directory")

    @staticmethod
    def _info(key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, tz=timezone.utc))

    def _tmp_name(self, directory: Path) -> Path:
        return directory / f"{TMP_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"

    # -- protocol ----------------------------------------------------------------------------
    def list(self, prefix: str) -> list[ObjectInfo]:
        def run() -> list[ObjectInfo]:
            self._check_root()
            base = self.root.joinpath(*[p for p in prefix.split("/") if p])
            out: list[ObjectInfo] = []
            stack = [(base, prefix.rstrip("/"))]
            while stack:
                d, rel = stack.pop()
                try:
                    it = os.scandir(d)
                except OSError as e:
                    if e.errno in _MISSING:
                        continue
                    raise
                with it:
                    for de in it:
                        if de.name.startswith(TMP_PREFIX):
                            continue
                        key = f"{rel}/{de.name}" if rel else de.name
                        try:
                            if de.is_dir(follow_symlinks=False):
                                stack.append((Path(de.path), key))
                            elif de.is_file(follow_symlinks=False):
                                out.append(self._info(key, de.stat(follow_symlinks=False)))
                        except OSError as e:  # vanished between scandir and stat
                            if e.errno not in _MISSING:
                                raise
            out.sort(key=lambda o: o.key)
            return out

        return self._bounded(f"list {prefix}", run)

    def get(self, key: str, limit: int | None = None) -> bytes:
        cap = bounded.MAX_JSON if limit is None else limit
        return self._bounded(f"read {key}", self._read_small, key, cap)

    def _read_small(self, key: str, cap: int) -> bytes:
        """A regular file's bytes, its size checked against ``cap`` before any byte is read."""
        try:
            return bounded.read_regular(self._path(key), cap, block=True)[0]
        except bounded.Refused as e:  # a FIFO, device, symlink or oversized object: this object's fault
            raise RemoteCorrupt(f"{self.description}: {e}") from None

    def _open_regular(self, key: str) -> Any:
        try:
            fd, _ = bounded.open_regular(self._path(key), block=True)
        except bounded.Refused as e:
            raise RemoteCorrupt(f"{self.description}: {e}") from None
        return os.fdopen(fd, "rb")

    def stream(self, key: str) -> Iterator[bytes]:
        f = self._bounded(f"open {key}", self._open_regular, key)
        try:
            while True:
                chunk = self._bounded(f"read {key}", f.read, CHUNK)
                if not chunk:
                    break
                yield chunk
        except RemoteUnavailable:
            # the abandoned reader still holds the buffer's lock: closing here would wait for it
            threading.Thread(target=f.close, name="kernelcache-remote-file-close", daemon=True).start()
            raise
        except BaseException:
            f.close()
            raise
        f.close()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._bounded(f"stat {key}", os.stat, self._path(key))
        except RemoteMissing:
            return None
        return self._info(key, st)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._bounded(f"create {key}", self._link_new, self._path(key), data)

    def put_file(self, key: str, path: Path, replace: bool = False) -> None:
        self._bounded(f"upload {key}", self._copy_in, self._path(key), Path(path), replace)

    def delete(self, key: str) -> None:
        try:
            self._bounded(f"delete {key}", os.unlink, self._path(key))
        except RemoteMissing:
            pass

    # -- file:// only (trim) -----------------------------------------------------------------
    def remove_empty_dirs(self, prefix: str) -> None:
        """Best effort: drop empty directories under ``prefix`` (after a trim)."""
        def run() -> None:
            base = self.root.joinpath(*[p for p in prefix.split("/") if p])
            for d, _dirs, _files in sorted(os.walk(base), key=lambda t: -len(t[0])):
                if Path(d) != base:
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass

        self._bounded(f"tidy {prefix}", run)

    def stale_temp_files(self, older_than: float) -> builtins.list[Path]:
        """Temp files of writers that died before linking (their names start with '.tmp-')."""
        import time

        def run() -> builtins.list[Path]:
            cutoff = time.time() - older_than
            out: builtins.list[Path] = []
            for d, _dirs, files in os.walk(self.root):
                for f in files:
                    p = Path(d) / f
                    try:
                        if f.startswith(TMP_PREFIX) and p.stat().st_mtime < cutoff:
                            out.append(p)
                    except OSError:
                        pass
            return out

        return self._bounded("scan temp files", run)

    # -- the commit primitive ----------------------------------------------------------------
    def _write_tmp(self, target: Path, write: Callable[[Any], None]) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_name(target.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            _unlink_quiet(tmp)
            raise
        return tmp

    def _link_new(self, target: Path, data: bytes) -> bool:
        tmp = self._write_tmp(target, lambda f: f.write(data))
        try:
            return _link_no_replace(tmp, target)
        finally:
            _unlink_quiet(tmp)
            fsync_dir(target.parent)

    def _copy_in(self, target: Path, src: Path, replace: bool) -> None:
        def write(f: Any) -> None:
            with open(src, "rb") as s:
                shutil.copyfileobj(s, f, CHUNK)

        tmp = self._write_tmp(target, write)
        try:
            if replace:
                os.replace(tmp, target)  # blobs only: content-addressed, ours are the right bytes
            else:
                _link_no_replace(tmp, target)  # exists: the same bytes by their name
        finally:
            _unlink_quiet(tmp)
            fsync_dir(target.parent)


def _link_no_replace(tmp: Path, target: Path) -> bool:
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        # NFS: a retransmitted LINK whose first reply was lost answers EEXIST for our own link.
        try:
            return os.stat(tmp).st_nlink >= 2 and os.path.samefile(tmp, target)
        except OSError:
            return False


def _unlink_quiet(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


