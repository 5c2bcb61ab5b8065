"""The exact compile and link command lines for a spec on this machine's toolchain.

The same plan is hashed into the cache key (with machine-specific prefixes replaced by
anchors) and executed by the builder, so what is keyed is exactly what runs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..host import gpu, toolchain

BUILD = "${BUILD}"

BASE_CXXFLAGS = ["-std=c++17", "-fPIC", "-O2", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"]
BASE_CFLAGS = ["-fPIC", "-O2", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"]
BASE_CUDAFLAGS = ["-Xcompiler", "-fPIC", "-std=c++17", "-O2", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"]
IDENTITY_SYMBOL = "__kernelcache_identity"
# pre-included where a tvm-ffi source exports functions: the same schema metadata as tvm-ffi's
# macro at a fraction of its compile cost (the header says why)
SCHEMA_EXPORT_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "csrc", "tvm_ffi_schema_export.h")
EXPORT_MACRO = b"TVM_FFI_DLL_EXPORT_TYPED_FUNC"
# GCC's compiler proper and assembler side by side through a pipe instead of one after the other
# through a temporary file: the same object bytes (so keys leave the flag out), ~1% less wall time
PIPE = "-pipe"
_GCC_BANNER = "Free Software Foundation"


def exports_functions(path: str) -> bool:
    """Does this source spell tvm-ffi's export macro? Only such a translation unit gets the
    schema-export header: pre-including it elsewhere would parse tvm-ffi's headers for nothing.
    (A source that exports through a macro of its own header keeps tvm-ffi's metadata macro.)"""
    try:
        with open(path, "rb") as f:
            return EXPORT_MACRO in f.read()
    except OSError:
        return False  # the compiler reports the missing source


class SourceStep:
    """One source's compile step (plain classes here: the plan is made on every load's path,
    and ``@dataclass`` creates each class through ``exec`` at import, ~0.5 ms a class)."""

    __slots__ = ("rel", "path", "lang", "obj", "_exports")

    def __init__(self, rel: str, path: str, lang: str, obj: str) -> None:
        self.rel = rel  # id relative to root (or absolute when outside root)
        self.path = path  # absolute realpath
        self.lang = lang  # "cxx" | "c" | "cuda"
        self.obj = obj  # object file name inside the build dir
        self._exports: bool | None = None

    @property
    def exports(self) -> bool:
        """Whether the source spells tvm-ffi's export macro (read once, when first asked)."""
        if self._exports is None:
            self._exports = self.lang != "c" and exports_functions(self.path)
        return self._exports

    def __repr__(self) -> str:
        return f"SourceStep(rel={self.rel!r}, path={self.path!r}, lang={self.lang!r}, obj={self.obj!r})"


class BuildPlan:
    """Everything a build of one spec runs: steps, tools, flags (a plain class: see SourceStep)."""

    __slots__ = ("spec", "sources", "cxx", "nvcc", "cxx_flags", "cuda_flags", "ld_flags", "_include_dirs",
                 "archs", "tools", "cc", "c_flags", "so_name", "shared", "kind_inputs", "schema_header",
                 "links_tvm_ffi")

    def __init__(self, spec: KernelSpec, sources: list[SourceStep], cxx: str, nvcc: str | None,
                 cxx_flags: list[str], cuda_flags: list[str], ld_flags: list[str],
                 include_dirs: list[str] | Callable[[], list[str]],
                 archs: tuple[str, ...], tools: dict[str, dict] | None = None, cc: str | None = None,
                 c_flags: list[str] | None = None, so_name: str = "", shared: bool = True,
                 kind_inputs: dict[str, str] | None = None, schema_header: str | None = None) -> None:
        self.spec, self.sources, self.cxx, self.nvcc = spec, sources, cxx, nvcc
        self.cxx_flags, self.cuda_flags, self.ld_flags = cxx_flags, cuda_flags, ld_flags
        self._include_dirs = include_dirs  # a list, or how to make it (only a build reads it)
        self.archs = archs
        self.tools = {} if tools is None else tools
        self.cc = cc  # C compiler, for .c sources (compiled as C, like tvm-ffi does)
        self.c_flags = [] if c_flags is None else c_flags
        self.so_name = so_name  # the output file (the kind's: ``<name>.so``, or ``<name>`` for an executable)
        self.shared = shared  # linked -shared (the kind's fact)
        self.kind_inputs = {} if kind_inputs is None else kind_inputs  # what the kind adds to the keys
        self.schema_header = schema_header  # pre-included into exporting C++/CUDA sources (tvm-ffi plans)
        self.links_tvm_ffi = True  # the kind's fact (Kind.checks.tvm_ffi): tvm-ffi's identity is in its key

    @property
    def include_dirs(self) -> list[str]:
        """Include directories in search order, realpaths: the absent-header probes of a build."""
        if callable(self._include_dirs):
            self._include_dirs = self._include_dirs()
        return self._include_dirs

    def compile_argv(self, step: SourceStep, build_dir: str) -> list[str]:
        obj = os.path.join(build_dir, step.obj)
        dep = obj + ".d"
        if step.lang == "c":
            assert self.cc is not None
            return [self.cc, "-MD", "-MF", dep, *self._pipe("cc"), *self.c_flags, "-c", step.path, "-o", obj]
        pre = ["-include", self.schema_header] if self.schema_header and step.exports else []
        if step.lang == "cuda":
            assert self.nvcc is not None
            return [self.nvcc, "-MD", "-MF", dep, *self.cuda_flags, *pre, "-c", step.path, "-o", obj]
        return [self.cxx, "-MD", "-MF", dep, *self._pipe("cxx"), *self.cxx_flags, *pre, "-c", step.path, "-o", obj]

    def _pipe(self, tool: str) -> list[str]:
        """``-pipe`` where the tool's ``--version`` banner is GCC's (others: nothing added)."""
        return [PIPE] if _GCC_BANNER in (self.tools.get(tool) or {}).get("version", "") else []

    def identity_argv(self, build_dir: str) -> list[str]:
        return [self.cxx, "-x", "c", "-fPIC", "-O1", "-c",
                os.path.join(build_dir, "kc_identity.c"), "-o", os.path.join(build_dir, "kc_identity.o")]

    def link_argv(self, build_dir: str) -> list[str]:
        objs = [os.path.join(build_dir, s.obj) for s in self.sources]
        objs.append(os.path.join(build_dir, "kc_identity.o"))
        shared = ["-shared"] if self.shared else []
        return [self.cxx, *shared, *objs, *self.ld_flags, "-o", os.path.join(build_dir, self.so_name)]

    def anchored(self, text: str, build_dir: str) -> str:
        """Replace the private build dir by an anchor (other anchors: anchors.anchors_for)."""
        return text.replace(build_dir, BUILD)

    def key_commands(self) -> dict:
        """Fully expanded command lines, build dir anchored (level1.level1 anchors the rest)."""
        bd = "/__kernelcache_build__"
        return {
            "compile": [[self.anchored(a, bd) for a in self.compile_argv(s, bd) if a != PIPE] for s in self.sources],
            "identity": [self.anchored(a, bd) for a in self.identity_argv(bd)],
            "link": [self.anchored(a, bd) for a in self.link_argv(bd)],
        }


def _resolve_dirs(spec: KernelSpec, dirs) -> list[str]:
    return [str(spec.abspath(d)) for d in dirs]


def nvcc_host_compiler(cuda_flags: Sequence[str]) -> str | None:
    """The host compiler nvcc will run (its identity is keyed): ``-ccbin``/``--compiler-bindir``
    in the flags, else ``NVCC_CCBIN`` (nvcc reads it), else g++ / c++ on PATH; a realpath."""
    host = None
    for i, f in enumerate(cuda_flags):
        if f in ("-ccbin", "--compiler-bindir") and i + 1 < len(cuda_flags):
            host = cuda_flags[i + 1]
        elif f.startswith(("-ccbin=", "--compiler-bindir=")):
            host = f.split("=", 1)[1]
    if host and os.path.isdir(host):
        host = os.path.join(host, "g++")
    host = host or os.environ.get("NVCC_CCBIN") or toolchain.which("g++") or toolchain.which("c++")
    if host and not os.path.isabs(host):
        host = toolchain.which(host) or host
    return os.path.realpath(host) if host else None


def tvm_ffi_plan(spec: KernelSpec, settings: Settings, so_name: str, shared: bool = True,
                 kind_inputs: dict[str, str] | None = None) -> BuildPlan:
    """A tvm-ffi module's plan: tvm-ffi's base flags, include dir and library are added
    (raises ToolchainError when a tool is missing)."""
    memo = settings.memo_dir
    cxx = os.path.realpath(toolchain.find_cxx())
    # In a fresh cache the compiler's --version runs while tvm-ffi is looked up, and
    # libtvm_ffi's hash (the key takes it) while the rest of the plan and key are made.
    toolchain.identities_ahead([cxx], [], memo)
    tvm = toolchain.tvm_ffi_paths(memo)
    toolchain.identities_ahead([], [tvm.lib_path], memo)
    tools = {"cxx": toolchain.tool_identity(cxx, memo)}
    user_inc = _resolve_dirs(spec, spec.include_dirs)
    sys_inc = _resolve_dirs(spec, spec.system_include_dirs)
    include_dirs = [*user_inc, tvm.include_dir, *sys_inc]
    inc_flags = [f"-I{d}" for d in [*user_inc, tvm.include_dir]] + [
        a for d in sys_inc for a in ("-isystem", d)
    ]
    cxx_flags = [*BASE_CXXFLAGS, *spec.cflags, *inc_flags]
    ld_flags = [f"-L{os.path.dirname(tvm.lib_path)}", "-ltvm_ffi", *spec.ldflags]
    nvcc = None
    cuda_flags: list[str] = []
    archs: tuple[str, ...] = ()
    steps = _steps(spec)
    cc, c_flags = None, []
    if any(st.lang == "c" for st in steps):
        cc = os.path.realpath(toolchain.find_cc())
        tools["cc"] = toolchain.tool_identity(cc, memo)
        c_flags = [*BASE_CFLAGS, *(f for f in spec.cflags if not f.startswith("-std=c++")), *inc_flags]
    if spec.is_cuda:
        cuda_home = toolchain.find_cuda_home()
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        tools["nvcc"] = toolchain.tool_identity(nvcc, memo)
        host = nvcc_host_compiler(spec.cuda_cflags)
        if host:
            tools["nvcc_host"] = toolchain.tool_identity(host, memo)
        archs = gpu.target_archs(settings.cuda_arch)
        cuda_inc = os.path.join(cuda_home, "include")
        cuda_flags = [*BASE_CUDAFLAGS, *gpu.gencode_flags(archs), *spec.cuda_cflags, *inc_flags]
        include_dirs.append(cuda_inc)
        lib64 = os.path.join(cuda_home, "lib64")
        ld_flags += [f"-L{lib64}", "-lcudart", f"-Wl,-rpath,{lib64}"]
    return BuildPlan(
        spec=spec, sources=steps, cxx=cxx, nvcc=nvcc, cxx_flags=cxx_flags, cuda_flags=cuda_flags,
        ld_flags=ld_flags, include_dirs=include_dirs, archs=archs, tools=tools, cc=cc, c_flags=c_flags,
        so_name=so_name, shared=shared, kind_inputs=dict(kind_inputs or {}), schema_header=SCHEMA_EXPORT_HEADER,
    )


def _steps(spec: KernelSpec) -> list[SourceStep]:
    steps = []
    for i, (rel, path) in enumerate(zip(map(str, spec.sources), spec.source_paths())):
        lang = "cuda" if rel.endswith(".cu") else ("c" if rel.endswith(".c") else "cxx")
        stem = Path(rel).name.replace(".", "_")
        steps.append(SourceStep(rel=rel, path=str(path), lang=lang, obj=f"s{i}_{stem}.o"))
    return steps


def verbatim_plan(spec: KernelSpec, settings: Settings, so_name: str, shared: bool = True,
                  kind_inputs: dict[str, str] | None = None) -> BuildPlan:
    """Kinds built the way another JIT builds them (torch's cpp_extension).

    Their drop-in translated the caller's arguments into the complete flag lists that JIT would
    pass (includes, defines, arch flags, libraries), so the flags are used verbatim: nothing of
    tvm-ffi is added. ``include_dirs``/``system_include_dirs`` only feed the absent-header
    probes. What kernelcache adds is the same for every kind: ``-MD`` depfiles and the identity
    object linked in.
    """
    memo = settings.memo_dir
    cxx = os.path.realpath(toolchain.find_cxx())
    tools = {"cxx": toolchain.tool_identity(cxx, memo)}
    steps = _steps(spec)
    def include_dirs() -> list[str]:  # resolved by a build only: a hit never reads them
        return _resolve_dirs(spec, spec.include_dirs) + _resolve_dirs(spec, spec.system_include_dirs)

    nvcc: str | None = None
    archs: tuple[str, ...] = ()
    if any(st.lang == "cuda" for st in steps):
        nvcc = os.path.join(toolchain.find_cuda_home(), "bin", "nvcc")
        tools["nvcc"] = toolchain.tool_identity(nvcc, memo)
        host = nvcc_host_compiler(spec.cuda_cflags)
        if host:
            tools["nvcc_host"] = toolchain.tool_identity(host, memo)
        archs = gpu.parse_arch_list(" ".join(
            f.split("code=")[-1] for f in spec.cuda_cflags if f.startswith("-gencode") and "code=sm_" in f))
    cc, c_flags = None, []
    if any(st.lang == "c" for st in steps):
        cc = os.path.realpath(toolchain.find_cc())
        tools["cc"] = toolchain.tool_identity(cc, memo)
        c_flags = [f for f in spec.cflags if not f.startswith("-std=c++")]
    return BuildPlan(
        spec=spec, sources=steps, cxx=cxx, nvcc=nvcc, cxx_flags=list(spec.cflags),
        cuda_flags=list(spec.cuda_cflags), ld_flags=list(spec.ldflags), include_dirs=include_dirs,
        archs=archs, tools=tools, cc=cc, c_flags=c_flags,
        so_name=so_name, shared=shared, kind_inputs=dict(kind_inputs or {}),
    )
