"""FlashInfer's own command lines for one module, expanded into argv lists.

Built by FlashInfer's own flag builders (``build_common_cflags`` / ``build_cflags`` /
``build_cuda_cflags``), at call time as its ninja file is, so ``CC``, ``FLASHINFER_EXTRA_*``
and the module's own gencode set are what FlashInfer would use. What the route changes:

* ``$cuda_home`` is the toolkit's real path (``/usr/local/cuda`` and ``/usr/local/cuda-13.0``
  are one toolkit: one key, where FlashInfer's ninja file is rewritten and everything rebuilt);
* FlashInfer's ``"-isystem DIR"`` tokens (one string each, split by the shell in ninja) become
  two argv items;
* ``-shared`` is the plan's (the link line is kernelcache's, with its identity object).

The link libraries mirror ``generate_ninja_build_for_op`` (version-gated: ``_gate``).
"""
from __future__ import annotations

import os
from typing import Any

from ..base.records import FrozenRecord


class CommandLines(FrozenRecord):
    """One module's lines (a FrozenRecord, not a dataclass: made on every routed load's path)."""

    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    include_dirs: tuple[str, ...]  # -I / -isystem directories, in search order (absent-header probes)
    cuda_home: str
    archs: tuple[str, ...]  # the module's own gencode set ("9.0a"): what entries are checked against


_SHELL = frozenset("'\"\\$`")  # what only a shell split reads right (after $cuda_home is put in)


def _expand(flags: list[str], common: list[str], cuda_home: str) -> list[str]:
    """FlashInfer's flag strings as argv items, as the shell in its ninja rule splits them.

    ``shlex`` only where a string has quotes, escapes or ``$`` left: it costs ~0.5 ms a string,
    and a module has ~50 (most of a warm load's flag time)."""
    out: list[str] = []
    for flag in flags:
        items = common if flag == "$common_cflags" else [flag]
        for item in items:
            item = item.replace("$cuda_home", cuda_home)
            if _SHELL.intersection(item):
                import shlex  # rare (quotes, escapes): not imported on the common path

                out.extend(shlex.split(item))
            else:
                out.extend(item.split())
    return out


def _include_dirs(argv: list[str]) -> list[str]:
    dirs: list[str] = []
    for i, a in enumerate(argv):
        if a in ("-isystem", "-I") and i + 1 < len(argv):
            dirs.append(argv[i + 1])
        elif a.startswith("-I") and len(a) > 2:
            dirs.append(a[2:])
    return list(dict.fromkeys(dirs))


def _archs(cuda_flags: list[str]) -> tuple[str, ...]:
    from ..host.gpu import parse_arch_list

    codes = [f.split("code=")[-1] for f in cuda_flags if f.startswith("-gencode") and "code=sm_" in f]
    return parse_arch_list(" ".join(codes)) if codes else ()


def command_lines(jit_spec: Any) -> CommandLines:
    """The flags FlashInfer would compile and link ``jit_spec`` with, now."""
    from flashinfer.jit import cpp_ext

    cuda_home = os.path.realpath(cpp_ext.get_cuda_path())
    common = cpp_ext.build_common_cflags(cuda_home, jit_spec.extra_include_dirs)
    cflags = _expand(cpp_ext.build_cflags(common, jit_spec.extra_cflags), common, cuda_home)
    cuda = _expand(cpp_ext.build_cuda_cflags(common, jit_spec.extra_cuda_cflags), common, cuda_home)
    ldflags = [f"-L{cuda_home}/lib64", f"-L{cuda_home}/lib64/stubs", "-lcudart", "-lcuda",
               *cpp_ext.parse_env_flags("FLASHINFER_EXTRA_LDFLAGS"), *(jit_spec.extra_ldflags or [])]
    return CommandLines(cflags=tuple(cflags), cuda_cflags=tuple(cuda), ldflags=tuple(ldflags),
                        include_dirs=tuple(_include_dirs(cuda or cflags)), cuda_home=cuda_home,
                        archs=_archs(cuda))
