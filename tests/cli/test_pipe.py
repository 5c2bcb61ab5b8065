"""A listing piped into ``head`` ends quietly (issue 46: ``kernelcache affected ... | head`` ended
in a ``BrokenPipeError`` traceback). A real pipe whose reader leaves after one line, and a
listing far larger than the pipe's buffer, so the writer meets the closed pipe mid-command."""
from __future__ import annotations

import subprocess
import sys

from .conftest import Cli


def test_affected_piped_into_head_ends_without_a_traceback(cli: Cli) -> None:
    repo = cli.tmp / "repo"
    (repo / "src").mkdir(parents=True)
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.email", "t@example.invalid"],
                ["config", "user.name", "t"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True, timeout=60)
    for i in range(4000):  # ~4,000 "changed:" lines, well past a pipe's 64 KiB
        (repo / "src" / f"module_with_a_long_name_{i:05d}.py").write_text("x = 1\n")
    p = subprocess.run(f"{sys.executable} -m kernelcache affected --since HEAD | head -1", shell=True, cwd=repo,
                       env=cli.env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.stdout.startswith("affected since HEAD"), p.stdout[:500] + p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr[-3000:]
