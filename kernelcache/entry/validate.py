"""Is this binary the one the spec expects? Size, sha256, ELF, symbols, identity, schemas.

Every path that hands out a module (local hit, fresh build, prebuilt root, fleet fetch) runs
the same checks, so a stale or foreign ``.so`` is rejected before it can be called:

* before ``dlopen`` (cheap, on the file): manifest format, manifest schema vs the expected one,
  size, ELF magic, exported symbol names, identity symbol, and sha256 when asked;
* after ``dlopen``: the identity the binary returns equals the manifest's (the handle really is
  this build, not a cached one of the same path), and every function's exported type schema.

Expected schemas come from the spec; a schema of ``None`` in the spec is "learned": the one
recorded in the entry's manifest (from its first good build) is what the binary must export.
Rejections are typed records (code + detail), so callers count and report them by code.

tvm-ffi exports ``__tvm_ffi__metadata_<fn>`` when built with
``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1``; its ``type_schema`` prints as e.g.
``Callable[[Tensor, int], None]``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..base import bounded
from ..base.errors import ToolchainError
from ..base.events import RejectCode
from ..base.records import FrozenRecord
from ..base.spec import KernelSpec
from ..host import gpu, native
from ..host.anchors import ROOT
from ..key import deps as key
from ..key.level1 import source_hashes, tvm_abi
from ..key.plan import IDENTITY_SYMBOL
from .manifest import FORMAT, Manifest

ELF_MAGIC = b"\x7fELF"
Mismatches = dict[str, tuple[str | None, str | None]]


class Rejection(FrozenRecord):
    """Why an entry may not be used: a short code (counted, reported) and a precise detail.
    (A ``FrozenRecord``: on every load's import path.)"""

    code: RejectCode
    detail: str
    mismatches: Mismatches | None = None

    def __post_init__(self) -> None:
        if type(self.code) is not RejectCode:  # a kind outside the package may give the word
            object.__setattr__(self, "code", RejectCode(self.code))  # (ValueError: not a code)

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True, slots=True)
class BinaryChecks:
    """What a kind requires of its binary before any of its code runs (``Kind.checks``): the core
    checks files, a kind says what a good file of its own is. tvm-ffi modules: ELF, each declared
    function exported as ``__tvm_ffi_<fn>``, schemas compared, the tvm-ffi ABI of the host; a
    plain C library: ELF and each function a plain symbol, no schemas, no tvm-ffi."""

    magic: bytes | None = ELF_MAGIC  # the file's first bytes (None: any format)
    symbol: str = "__tvm_ffi_{}"  # the symbol a declared function is exported as
    schemas: bool = True  # the spec's functions carry tvm-ffi type schemas, compared with the entry's
    tvm_ffi: bool = True  # linked against tvm-ffi: an entry built elsewhere must match this host's ABI


TVM_FFI = BinaryChecks()


# -- schemas -------------------------------------------------------------------------------------
def normalise(schema: str | None) -> str | None:
    return None if schema is None else "".join(schema.split())


def expected_schemas(spec: KernelSpec, manifest: Manifest | None) -> dict[str, str | None]:
    """The spec's schemas, with learned (None) ones filled in from the manifest when recorded."""
    recorded = manifest.schemas if manifest is not None else {}
    return {fn: (exp if exp is not None else recorded.get(fn)) for fn, exp in spec.schemas.items()}


def compare(expected: Mapping[str, str | None], found: Mapping[str, str | None]) -> Mismatches:
    """Functions whose found schema differs; a missing function always differs.

    An expected ``None`` (learned, nothing recorded yet) only requires the function to exist.
    """
    out: Mismatches = {}
    for fn, exp in expected.items():
        got = found.get(fn)
        if got is None or (exp is not None and normalise(got) != normalise(exp)):
            out[fn] = (exp, got)
    return out


def describe(mism: Mismatches) -> str:
    """The one way "expected vs found" is written."""
    return "; ".join(f"{fn}: expected {exp if exp is not None else '<any>'}, "
                     f"found {got if got is not None else '<missing>'}" for fn, (exp, got) in sorted(mism.items()))


def exported_schemas(module: Any, names: list[str]) -> dict[str, str | None]:
    """Read each function's type schema from a loaded tvm-ffi module's metadata."""
    from tvm_ffi.core import TypeSchema

    found: dict[str, str | None] = {}
    for fn in names:
        try:
            meta = module.get_function_metadata(fn)
        except Exception:  # noqa: BLE001 - any failure means "no usable metadata"
            meta = None
        if not meta or "type_schema" not in meta:
            found[fn] = None
            continue
        try:
            found[fn] = repr(TypeSchema.from_json_str(meta["type_schema"]))
        except Exception:  # noqa: BLE001
            found[fn] = None
    return found


# -- the binary ------------------------------------------------------------------------------------
def binary_problem(so_path: Path, functions: list[str], expected_size: int | None = None,
                   expected_sha256: str | None = None, checks: BinaryChecks = TVM_FFI) -> str | None:
    """Cheap pre-dlopen checks: size, ELF magic, expected symbol names, and (if given) sha256.

    The file is opened as a regular file only (no FIFO, device or final symlink: a root's binary
    comes from elsewhere) and its size compared before any byte is read; then it is read in
    chunks, never whole, so a claimed size costs time, not memory."""
    try:
        fd, st = bounded.open_regular(so_path)
    except OSError as e:
        return f"cannot read {Path(so_path).name}: {e}"
    try:
        if expected_size is not None and st.st_size != expected_size:
            return f"size {st.st_size} != recorded {expected_size} (truncated or replaced)"
        return _scan_binary(fd, st.st_size, functions, expected_sha256, checks)
    finally:
        os.close(fd)


def _scan_binary(fd: int, size: int, functions: list[str], expected_sha256: str | None,
                 checks: BinaryChecks) -> str | None:
    """Hash and search the open binary chunk by chunk (a symbol may straddle two chunks)."""
    symbols = [checks.symbol.format(fn) for fn in functions]
    wanted = {f"{sym}\0".encode(): f"symbol {sym} not exported" for sym in symbols}
    wanted.setdefault(f"{IDENTITY_SYMBOL}\0".encode(), "identity symbol missing")
    keep = max(map(len, wanted)) - 1
    h = hashlib.sha256() if expected_sha256 is not None else None
    n, head, tail, missing = 0, b"", b"", dict(wanted)
    while n <= size:
        chunk = os.read(fd, min(1 << 22, size + 1 - n))
        if not chunk:
            break
        if h is not None:
            h.update(chunk)
        head = head or chunk[:max(len(ELF_MAGIC), len(checks.magic or b""))]
        window = tail + chunk
        missing = {k: v for k, v in missing.items() if k not in window}
        tail, n = window[-keep:], n + len(chunk)
    if n != size:
        return f"size {n} != {size} it had when opened (changed while read)"
    if h is not None and h.hexdigest() != expected_sha256:
        return "sha256 of the .so differs from the manifest (corrupted or replaced)"
    if checks.magic is not None and head[:len(checks.magic)] != checks.magic:
        return "not an ELF file" if checks.magic == ELF_MAGIC else f"does not start with {checks.magic!r}"
    return next(iter(missing.values()), None)


def read_identity(so_path: Path) -> str | None:
    """Call the identity function of an (already loaded) module; same handle as tvm-ffi's dlopen."""
    try:
        lib = ctypes.CDLL(str(so_path))
        fn = getattr(lib, IDENTITY_SYMBOL)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    value = fn()
    return value.decode() if value else None


def before_dlopen(spec: KernelSpec, manifest: Manifest, so_path: Path, check_sha: bool,
                  checks: BinaryChecks = TVM_FFI) -> Rejection | None:
    """Everything that can be checked on the file, before any of its code can run."""
    if manifest.format != FORMAT:
        return Rejection(RejectCode.FORMAT, f"manifest format {manifest.format} != {FORMAT}")
    if manifest.name != spec.name:
        return Rejection(RejectCode.FORMAT, f"manifest is for kernel {manifest.name!r}")
    if manifest.kind != spec.kind:
        return Rejection(RejectCode.FORMAT, f"manifest is for a {manifest.kind} binary, expected {spec.kind}")
    mism = compare(expected_schemas(spec, manifest), manifest.schemas) if checks.schemas else None
    if mism:
        return Rejection(RejectCode.SCHEMA, "manifest schema differs: " + describe(mism), mism)
    if not isinstance(manifest.so_name, str) or os.path.basename(manifest.so_name) != manifest.so_name \
            or manifest.so_name in ("", ".", ".."):
        return Rejection(RejectCode.BINARY, f"binary name {manifest.so_name!r} is not a file name in the entry")
    problem = binary_problem(so_path, list(spec.functions), manifest.so_size,
                             manifest.so_sha256 if check_sha else None, checks)
    return Rejection(RejectCode.BINARY, problem) if problem else None


def after_dlopen(spec: KernelSpec, manifest: Manifest | None, module: Any, so_path: Path,
                 identity: str | None) -> tuple[Rejection | None, dict[str, str | None]]:
    """Identity and exported schemas of a loaded module. Returns (rejection, exported schemas)."""
    if identity is not None:
        ident = read_identity(so_path)
        if ident != identity:
            return Rejection(RejectCode.IDENTITY, f"identity {ident!r} != manifest's {identity!r} "
                                         "(binary of another build)"), {}
    found = exported_schemas(module, list(spec.functions))
    mism = compare(expected_schemas(spec, manifest), found)
    if mism:
        return Rejection(RejectCode.EXPORTED_SCHEMA, "exported schema differs: " + describe(mism), mism), found
    return None, found


def cpu_refusal(m: Manifest) -> Rejection | None:
    """An entry built with ``-march=native`` (or ``-mcpu``/``-mtune=native``) on a CPU with
    features this CPU lacks: refused (running it would crash with an illegal instruction).

    Not a defect of the entry (another host of a shared cache or the fleet can run it), so a
    caller skips it without quarantining it."""
    nat = (m.inputs or {}).get("native")
    missing = native.missing_features(nat)
    if not missing or not nat:
        return None
    return Rejection(RejectCode.CPU, f"built with {' '.join(nat.get('flags') or ['-march=native'])} for a CPU with "
                            f"{', '.join(missing)}, which this CPU lacks (it would crash with an illegal "
                            "instruction)")


# -- entries built elsewhere (prebuilt roots, the fleet cache) ------------------------------------
# (archs, CPU features) -> (source key, its inputs) of this spec, None: this host's own
# (``search.Lookup.source``); None when it cannot be computed
SourceOf = Callable[[tuple[str, ...] | None, list[str] | None], "tuple[str, dict] | None"]


class Installation(FrozenRecord):
    """The facts of this host a foreign entry is checked against (computed once per load)."""

    tvm_ffi_version: str
    anchors: list[tuple[str, str]]
    cuda_arch: str | None  # Settings.cuda_arch
    source_hashes: dict[str, str] | None = None  # this spec's sources (None: hashed when needed)
    source: SourceOf | None = None  # this spec's source key (None: not checked, a caller that has no spec's)


def installation_refusal(spec: KernelSpec, m: Manifest, inst: Installation, strict_external: bool,
                         checks: BinaryChecks = TVM_FFI) -> Rejection | None:
    """Why an entry built on another machine may not be used here (None: it may).

    Same sources and package headers as this installation, a compatible tvm-ffi ABI, a matching
    arch and a loadable CUDA runtime, the expected schemas, and the whole build: this spec's
    source key (:func:`build_refusal`: flags, defines, include dirs, link line...).
    ``strict_external``: dependencies outside the anchors that exist on this host must have the
    recorded bytes (fleet entries keep them; artifact roots drop them at export). Bytes,
    identity and exported schemas are checked afterwards like for any entry.
    """
    if m.name != spec.name:
        return Rejection(RejectCode.INSTALLATION, f"built for kernel {m.name!r}")
    if m.source_hashes != (inst.source_hashes if inst.source_hashes is not None else source_hashes(spec)):
        return Rejection(RejectCode.INSTALLATION, "built from different sources than this installation")
    cpu = cpu_refusal(m)
    if cpu is not None:
        return cpu
    if m.kind != spec.kind:
        return Rejection(RejectCode.INSTALLATION, f"a {m.kind} binary, expected {spec.kind}")
    if dict(m.inputs.get("extra_abi") or {}) != dict(spec.abi):
        return Rejection(RejectCode.INSTALLATION, f"ABI {m.inputs.get('extra_abi') or {}} != this installation's {dict(spec.abi)}")
    check = key.check_deps(m.deps, m.absent, inst.anchors, only_anchor=None if strict_external else ROOT,
                           tolerate_missing_external=True)
    if not check.ok:
        return Rejection(RejectCode.DEPS, f"{'headers' if strict_external else 'package headers'} differ: {check.reason}")
    if checks.tvm_ffi and tvm_abi(m.tvm_ffi_version) != tvm_abi(inst.tvm_ffi_version):
        return Rejection(RejectCode.INSTALLATION, f"tvm-ffi ABI {m.tvm_ffi_version} != installed {inst.tvm_ffi_version}")
    if spec.is_cuda:
        want = m.archs
        try:
            local = gpu.target_archs(inst.cuda_arch)
        except ToolchainError as e:
            return Rejection(RejectCode.INSTALLATION, f"cannot tell this machine's CUDA arch: {e}")
        if not want or not set(local) <= set(want):
            return Rejection(RejectCode.INSTALLATION, f"built for arch {list(want)}, this machine needs {list(local)}")
        major = str((m.prebuilt or {}).get("cuda_major") or "")
        if not major or not gpu.cuda_runtime_loadable(major):
            return Rejection(RejectCode.INSTALLATION, f"CUDA runtime libcudart.so.{major or '?'} not found on this machine")
    mism = compare(expected_schemas(spec, m), m.schemas) if checks.schemas else None
    if mism:
        return Rejection(RejectCode.SCHEMA, "schema differs: " + describe(mism), mism)
    return build_refusal(spec, m, inst) if inst.source is not None else None


def build_refusal(spec: KernelSpec, m: Manifest, inst: Installation) -> Rejection | None:
    """Is an entry built elsewhere *this* build? Its recorded source key must be this spec's, the
    key the fleet indexes by (``source_key``: sources, the spec's flags, defines, include dirs and
    link line, arch, tvm-ffi ABI, the kind's facts): one owner of "the same build", so an input
    added to that key is checked here too.

    Two facts of the key belong to the host, and were checked above against the entry's: its
    arch list (this host's target archs are among them: a multi-arch build serves each) and,
    for ``-march=native``, its CPU (this CPU has every feature its code needs). Where the key
    differs only by those, it is recomputed with the entry's. A refusal names what differs,
    from the inputs the manifest records in clear (``Manifest.skey_inputs``).
    """
    assert inst.source is not None
    if not m.skey:
        return Rejection(RejectCode.INSTALLATION, "records no source key (written by an older kernelcache), so its flags "
                                         "cannot be checked: rebuild it (kernelcache build)")
    here = inst.source(None, None)
    if here is None:
        return Rejection(RejectCode.INSTALLATION, "cannot compute this spec's source key (CUDA target arch unknown)")
    if here[0] == m.skey:
        return None
    rec = m.skey_inputs
    archs = tuple((rec or {}).get("arch") or m.archs) if spec.is_cuda else None
    if archs is not None and not set(here[1].get("arch") or ()) <= set(archs):
        archs = None  # (the arch check above read the level-1 inputs; the key's list must cover them too)
    native_cpu = (rec or {}).get("native_cpu") if (m.inputs or {}).get("native") else None
    if (archs is not None and list(archs) != here[1].get("arch")) or native_cpu is not None:
        alt = inst.source(archs, native_cpu)
        if alt is not None:
            if alt[0] == m.skey:
                return None
            here = alt  # the host's facts are the entry's: the difference is elsewhere
    if rec is None:
        return Rejection(RejectCode.INSTALLATION, f"built from other inputs than this spec (source key {m.skey[:12]}, this "
                                         f"spec's {here[0][:12]}); its manifest does not name them: rebuild it "
                                         "(kernelcache build) to see which")
    from ..key.source_key import diff

    lines = diff(rec, here[1]) or [f"source key {m.skey[:12]} != this spec's {here[0][:12]}"]
    return Rejection(RejectCode.INSTALLATION, "built from other inputs than this spec: " + "; ".join(lines))
