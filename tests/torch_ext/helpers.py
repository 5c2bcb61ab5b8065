"""Test helpers: the seed extension (a pybind11 module exposing ``struct Param``) and a runner
that loads an extension in a fresh process through plain torch or through the drop-in."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PARAM_V1 = """#pragma once
struct Param { int min_window = 1; };
#define PARAM_VERSION 1
#define PARAM_FIELDS(cls) cls.def_readwrite("min_window", &Param::min_window)
"""
PARAM_V2 = """#pragma once
struct Param { int min_window = 1; int min_match_window_size = 4; };
#define PARAM_VERSION 2
#define PARAM_FIELDS(cls) cls.def_readwrite("min_window", &Param::min_window) \\
                             .def_readwrite("min_match_window_size", &Param::min_match_window_size)
"""
SEED_SRC = """#include <pybind11/pybind11.h>
#include "param.h"
namespace py = pybind11;
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  auto cls = py::class_<Param>(m, "Param");
  cls.def(py::init<>());
  PARAM_FIELDS(cls);
  m.def("version", [] { return PARAM_VERSION; });
}
"""
SEED_NAME = "ngram_corpus_cpp"


def write_seed(checkout: Path, header: str, mtime: float | None = None) -> Path:
    """A checkout of the seed package: ngram.cpp + param.h (header of the given version)."""
    checkout.mkdir(parents=True, exist_ok=True)
    (checkout / "ngram.cpp").write_text(SEED_SRC)
    (checkout / "param.h").write_text(header)
    if mtime is not None:
        for f in ("ngram.cpp", "param.h"):
            os.utime(checkout / f, (mtime, mtime))
    return checkout / "ngram.cpp"


LOADER = r"""
import json, sys
import torch
side, name, srcs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if side == "torch":
    from torch.utils import cpp_extension as ce
else:
    from kernelcache import cpp_extension as ce
out = {}
m = ce.load(name, srcs)
out["file"] = m.__file__
out["version"] = m.version()
try:
    out["min_match_window_size"] = m.Param().min_match_window_size
except AttributeError as e:
    out["error"] = f"AttributeError: {e}"
print("RESULT " + json.dumps(out), flush=True)
"""


def result(proc: subprocess.CompletedProcess) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"no result (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def load_cmd(side: str, name: str, sources: list[Path | str]) -> list[str]:
    return [sys.executable, "-c", LOADER, side, name, json.dumps([str(s) for s in sources])]


def load_in_fresh_process(env: dict, side: str, name: str, sources: list[Path | str], timeout: float = 600) -> dict:
    proc = subprocess.run(load_cmd(side, name, sources), env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"{side} load failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return result(proc)


def dedent(code: str) -> str:
    return textwrap.dedent(code)
