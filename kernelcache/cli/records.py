"""Kernels by name for the per-kernel commands: shipped, ``--spec MOD:FUNC``, or the cache's records.

Why records: ``ls`` and ``stats`` list every kernel the cache holds (user kernels, drop-in
``load_inline`` kernels), so ``explain``, ``warm`` and ``verify`` must accept those names too.
A built entry records everything its spec was made of: the manifest's level-1 inputs hold the
anchored command lines (source order, flags, include dirs, link flags, schemas), and the
entry's ``build.ninja`` holds the real path of each source, which gives back the ``root``.
The spec rebuilt from them produces the same command lines, so its key is the entry's key while
the sources and headers are unchanged, and ``explain`` then says exactly what changed since.

Each kind is rebuilt its own way: a tvm-ffi entry's flags are what remains once tvm-ffi's base
flags are taken off; a torch entry (``torch_python`` / ``torch_library`` / ``executable``) ran
the drop-in's flags verbatim, so its flags are the command lines themselves, and its kind and
torch ABI facts come from the recorded inputs. Fetched (fleet) entries carry no ``build.ninja``:
their root is the directory under this cache's generated sources (``inline/``) whose files hold
the recorded bytes; when no such directory exists the error says so instead of "unknown".
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .. import kinds
from ..base.errors import KernelCacheError, SpecError, UnknownKernel
from ..base.layout import BUILT
from ..base.spec import KernelSpec, specs_from_ref
from ..entry.manifest import Manifest
from ..host.anchors import ROOT, machine_anchors
from ..key.plan import BASE_CFLAGS, BASE_CUDAFLAGS, BASE_CXXFLAGS
from ..storage.entry import Entry

TVM_INCLUDE = "-I${TVM_FFI}/include"


class NoSourcesHere(KernelCacheError):
    """The cache holds entries of the kernel, but none says where its sources are on this host."""


def resolve(names: list[str], refs: list[str], settings, default_all: bool = True,
            search: list[str] | None = None, fetched: bool = True) -> dict[str, KernelSpec]:
    """Specs for ``names`` (default: every shipped kernel plus every ``--spec`` one); ``search``:
    where a ref's module is looked for when not importable (default: the current directory);
    ``fetched=False``: a spec is rebuilt from entries built here only (NoSourcesHere otherwise)."""
    from ..kernels import shipped_kernel_names, shipped_specs

    declared: dict[str, KernelSpec] = {}
    for ref in refs:
        for s in specs_from_ref(ref, search or [os.getcwd()]):
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
            spec = from_records(n, settings, fetched)
            if spec is None:
                recorded = recorded_names(settings)
                if n in recorded:
                    raise NoSourcesHere(
                        f"kernel {n!r} is in the cache, but none of its entries says where its sources are on "
                        "this host (entries fetched from the fleet record only their bytes); name its spec "
                        "with --spec MODULE:FUNC")
                raise UnknownKernel(n, sorted({*shipped_kernel_names(), *declared, *recorded}))
            out[n] = spec
    return out


def recorded_names(settings) -> set[str]:
    from ..storage.local import LocalStore

    return {i.name for i in LocalStore(settings).infos()}


def from_records(name: str, settings, fetched: bool = True) -> KernelSpec | None:
    """The spec of the most recently used entry of ``name`` (built here first, then fetched
    unless ``fetched`` is false), or None."""
    from ..base.layout import Layout
    from ..entry import manifest as manifest_mod
    from ..storage.local import LocalStore

    store = LocalStore(settings)
    infos = sorted((i for i in store.infos(name) if fetched or i.area == BUILT),
                   key=lambda i: (i.area != BUILT, -i.last_used))
    for info in infos:
        m = manifest_mod.read(info.path)
        if m is not None:
            spec = spec_of(Entry(info.path, m), Layout(settings.cache_dir).inline)
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


def _inline_root(inline: Path | None, sources: dict) -> str | None:
    """The generated-sources directory (``inline/<name>/<digest>``) holding exactly these bytes."""
    import hashlib

    if inline is None or not sources:
        return None
    try:
        groups = [g for n in inline.iterdir() if n.is_dir() for g in n.iterdir() if g.is_dir()]
    except OSError:
        return None
    for d in groups:
        try:
            if all(hashlib.sha256((d / rel).read_bytes()).hexdigest() == h for rel, h in sources.items()):
                return str(d)
        except OSError:
            continue
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


def spec_of(entry: Entry, inline: Path | None = None) -> KernelSpec | None:
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
    root = _root_of(entry.path, rels) or _inline_root(inline, (m.inputs or {}).get("sources") or {})
    if root is None:
        return None
    real = _real(root)
    kind = (m.inputs or {}).get("kind") or m.kind or "tvm_ffi"
    try:
        verbatim = kinds.of(kind).verbatim_flags
    except SpecError:  # a kind this process does not know (its distribution is not installed here)
        return None
    if verbatim:  # another JIT's complete lines (torch kinds)
        return _foreign_spec(m, rels, compile_cmds, cmds["link"], root, real, kind)

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


def _real(root: str) -> Callable[[str], str]:
    """A recorded token with its anchors (``${ROOT}`` for ``root``, the machine's, longest path
    first) replaced by this host's paths."""
    anchors = sorted([(ROOT, root), *machine_anchors()], key=lambda p: -len(p[1]))

    def real(tok: str) -> str:
        for name, prefix in anchors:
            tok = tok.replace(name, prefix)
        return tok

    return real


def _flags_between(cmd: list[str]) -> list[str]:
    """The flags of a compile line ``[tool, -MD, -MF, depfile, *flags, -c, source, -o, object]``."""
    return cmd[cmd.index("-MF") + 2: cmd.index("-c")] if "-MF" in cmd and "-c" in cmd else []


def _foreign_spec(m: Manifest, rels: list[str], compile_cmds: list, link: list[str], root: str,
                  real: Callable[[str], str], kind: str) -> KernelSpec | None:
    """A torch-kind entry: the drop-in's flags ran verbatim (plan._foreign_plan), so they are read
    back as they are; kind and the torch/Python ABI facts come from the recorded inputs."""
    cflags: list[str] = []
    cuda_cflags: list[str] = []
    for rel, c in zip(rels, compile_cmds):
        if rel.endswith(".cu"):
            cuda_cflags = _flags_between(c)
        elif not rel.endswith(".c"):  # C sources run the C++ flags less -std=c++*
            cflags = _flags_between(c)
    out = link.index("-o") if "-o" in link else len(link)
    objs = [i for i, tok in enumerate(link[:out]) if tok.startswith("${BUILD}/")]
    ld = link[(objs[-1] + 1 if objs else 1):out]
    cflags, cuda_cflags, ld = [real(f) for f in cflags], [real(f) for f in cuda_cflags], [real(f) for f in ld]
    inc = [f[2:] for f in cflags if f.startswith("-I") and len(f) > 2]  # (as the drop-in derives them)
    sys_inc = [cflags[i + 1] for i, f in enumerate(cflags[:-1]) if f == "-isystem"]
    try:
        return KernelSpec(name=m.name, sources=rels, root=root, include_dirs=inc, system_include_dirs=sys_inc,
                          cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ld, kind=kind,
                          abi=dict((m.inputs or {}).get("extra_abi") or {}),
                          backend=(m.inputs or {}).get("backend", "auto"))
    except ValueError:
        return None
