"""Kernels by name for the per-kernel commands: shipped, ``--spec MOD:FUNC``, or the cache's records.

Why records: ``ls`` and ``stats`` list every kernel the cache holds (user kernels, drop-in
``load_inline`` kernels), so ``explain``, ``warm`` and ``verify`` must accept those names too.
A built entry records everything its spec was made of: the manifest's level-1 inputs hold the
anchored command lines (source order, flags, include dirs, link flags, schemas), and the
entry's ``build.ninja`` holds the real path of each source, which gives back the ``root``.
The spec rebuilt from them produces the same command lines, so its key is the entry's key while
the sources and headers are unchanged, and ``explain`` then says exactly what changed since.
"""
from __future__ import annotations

import os
from pathlib import Path

from .. import toolchain
from ..errors import UnknownKernel
from ..layout import BUILT
from ..manifest import Manifest
from ..plan import BASE_CFLAGS, BASE_CUDAFLAGS, BASE_CXXFLAGS, ROOT
from ..spec import KernelSpec, specs_from_ref
from ..storage.entry import Entry

TVM_INCLUDE = "-I${TVM_FFI}/include"


def resolve(names: list[str], refs: list[str], settings, default_all: bool = True) -> dict[str, KernelSpec]:
    """Specs for ``names`` (default: every shipped kernel plus every ``--spec`` one)."""
    from ..kernels import shipped_kernel_names, shipped_specs

    declared: dict[str, KernelSpec] = {}
    for ref in refs:
        for s in specs_from_ref(ref, [os.getcwd()]):
            declared[s.name] = s
    if not names:
        return {**(shipped_specs(None, settings) if default_all and not refs else {}), **declared}
    out: dict[str, KernelSpec] = {}
    for n in names:
        if n in declared:
            out[n] = declared[n]
        elif n in shipped_kernel_names():
            out[n] = shipped_specs([n], settings)[n]
        else:
            spec = from_records(n, settings)
            if spec is None:
                raise UnknownKernel(n, sorted({*shipped_kernel_names(), *declared, *recorded_names(settings)}))
            out[n] = spec
    return out


def recorded_names(settings) -> set[str]:
    from ..storage.local import LocalStore

    return {i.name for i in LocalStore(settings).infos()}


def from_records(name: str, settings) -> KernelSpec | None:
    """The spec of the most recently used entry of ``name`` built on this host, or None."""
    from ..storage.local import LocalStore

    store = LocalStore(settings)
    infos = sorted((i for i in store.infos(name) if i.area == BUILT), key=lambda i: -i.last_used)
    for info in infos:
        from .. import manifest as manifest_mod

        m = manifest_mod.read(info.path)
        if m is not None:
            spec = spec_of(Entry(info.path, m))
            if spec is not None:
                return spec
    return None


def _ninja_inputs(entry_dir: Path) -> list[str]:
    try:
        text = (entry_dir / "build.ninja").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        if line.startswith("build ") and ": run " in line.replace("$:", "\0"):
            src = line.replace("$:", "\0").split(": run ", 1)[1].split(" ")[0]
            out.append(src.replace("\0", ":").replace("$$", "$"))
    return [p.replace("$ ", " ") for p in out]


def _root_of(entry_dir: Path, rels: list[str]) -> str | None:
    inputs = _ninja_inputs(entry_dir)
    for rel in rels:
        for p in inputs:
            if not os.path.isabs(rel) and p.endswith(os.sep + rel):
                return p[: -len(rel) - 1]
    return None


def _split_includes(flags: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(cflags, include dirs, system include dirs) of ``[*base-stripped flags, *include flags]``."""
    if TVM_INCLUDE not in flags:
        return flags, [], []
    i = flags.index(TVM_INCLUDE)
    before, after = flags[:i], flags[i + 1:]
    inc: list[str] = []
    while before and before[-1].startswith("-I"):
        inc.insert(0, before.pop()[2:])
    sys_inc = [after[k + 1] for k in range(0, len(after) - 1, 2) if after[k] == "-isystem"]
    return before, inc, sys_inc


def spec_of(entry: Entry) -> KernelSpec | None:
    """Rebuild the KernelSpec an entry was built from (None when its records do not say)."""
    m: Manifest = entry.manifest
    cmds = (m.inputs or {}).get("commands") or {}
    compile_cmds = cmds.get("compile") or []
    if not compile_cmds or not cmds.get("link"):
        return None
    rels = []
    for c in compile_cmds:
        src = c[c.index("-c") + 1] if "-c" in c else ""
        rels.append(src[len(ROOT) + 1:] if src.startswith(ROOT + "/") else src)
    root = _root_of(entry.path, rels)
    if root is None:
        return None
    anchors = _anchors(root)

    def real(tok: str) -> str:
        for name, prefix in anchors:
            tok = tok.replace(name, prefix)
        return tok

    cflags: list[str] = []
    cuda_cflags: list[str] = []
    inc: list[str] = []
    sys_inc: list[str] = []
    for rel, c in zip(rels, compile_cmds):
        flags = c[c.index("-MF") + 2: c.index("-c")]
        if rel.endswith(".cu"):
            flags = flags[len(BASE_CUDAFLAGS):]
            while flags and flags[0].startswith("-gencode="):
                flags.pop(0)
            cuda_cflags, inc, sys_inc = _split_includes(flags)
        elif rel.endswith(".c"):
            continue  # C flags are the C++ flags less -std=c++*: taken from a C++ source
        else:
            flags = flags[len(BASE_CXXFLAGS):]
            cflags, inc, sys_inc = _split_includes(flags)
    if all(r.endswith(".c") for r in rels):
        c = compile_cmds[0]
        cflags, inc, sys_inc = _split_includes(c[c.index("-MF") + 2: c.index("-c")][len(BASE_CFLAGS):])
    link = cmds["link"]
    ld = link[link.index("-ltvm_ffi") + 1: link.index("-o")] if "-ltvm_ffi" in link and "-o" in link else []
    if m.inputs.get("backend") == "cuda" and len(ld) >= 3 and ld[-2] == "-lcudart":
        ld = ld[:-3]
    try:
        return KernelSpec(name=m.name, sources=rels, root=root, include_dirs=[real(d) for d in inc],
                          system_include_dirs=[real(d) for d in sys_inc], cflags=[real(f) for f in cflags],
                          cuda_cflags=[real(f) for f in cuda_cflags], ldflags=[real(f) for f in ld],
                          functions=dict(m.inputs.get("functions") or {}), backend=m.inputs.get("backend", "auto"))
    except ValueError:
        return None


def _anchors(root: str) -> list[tuple[str, str]]:
    tvm_dir = toolchain.tvm_ffi_paths().package_dir
    return [(ROOT, root), ("${TVM_FFI}", tvm_dir), ("${SITE}", os.path.dirname(tvm_dir))]
