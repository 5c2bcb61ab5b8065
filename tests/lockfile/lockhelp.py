"""Helpers of the kernel-lock tests (issue 39 part A): an app run in a real process, the CLI,
a header edited with its mtime put back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import HANG_S, KcEnv, spec_code

# The app: a user tvm-ffi kernel (tests.support's adder project) and, with NGRAM=1, the shipped
# n-gram corpus; prints kc.stats() as JSON on its last line.
APP = """
import os
{spec}
mod = kc.load(spec)
assert mod.add(2, 3) == 5 + OFFSET
if os.environ.get("NGRAM") == "1":
    from kernelcache.kernels import NgramCorpus
    NgramCorpus()
print(json.dumps(kc.stats()))
"""


def app_code(base: Path, offset: int = 0, **kw: object) -> str:
    return APP.replace("OFFSET", str(offset)).format(spec=spec_code(base, **kw))


def run_app(env: KcEnv, base: Path, offset: int = 0, check: bool = True, extra: dict | None = None,
            **kw: object) -> subprocess.CompletedProcess:
    return env.run_py(app_code(base, offset, **kw), check=check, **(extra or {}))


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def kc_cli(env: KcEnv, *argv: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelcache", *argv], capture_output=True, text=True,
                          env=env.env(**extra), stdin=subprocess.DEVNULL, timeout=HANG_S)


def edit_keep_mtime(path: Path, text: str) -> None:
    """New bytes at ``path`` with its mtime put back, as a checkout or a copy tool can leave it."""
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


def events_of(log: Path, event: str) -> list[dict]:
    if not log.exists():
        return []
    return [e for e in (json.loads(line) for line in log.read_text().splitlines() if line.strip())
            if e.get("event") == event]
