"""The kind protocol: every step of a load that differs per module kind, with its defaults.

A kind is a stateless object (``KIND`` in its file). The plan, the key, the build, publishing
and the lookup are shared; a kind supplies only facts and steps:

* the plan (``plan``: the exact command lines; by default the spec's flags used as given,
  ``plan.verbatim_plan``; the tvm-ffi kind adds tvm-ffi's base flags, includes and library) and
  its facts: the output file's name, whether it is linked ``-shared``, whether the spec's flags
  are complete (``verbatim_flags``, which the source key reads);
* key facts: what the kind adds to the level-1 and source keys (``key_inputs``);
* what a fresh build records, read from the linked binary before anything is published
  (exported schemas, exported surface; BuildError when it cannot even be inspected); the
  fresh entry then passes the same door as every other (``admit.accept``);
* the file checks its binary needs before any code runs (``checks``: ELF, how a declared
  function is exported, whether schemas and the tvm-ffi ABI apply);
* admission of an entry whose file checks passed: ``admit`` returns (module, None) or
  (None, Rejection); any exception it raises is a rejection too;
* the lean load of a recalled call (``recall_load``);
* labels for reports.

A kind may live outside the package: ``kinds.registry`` finds it through the entry-point group
``kernelcache.kinds`` (docs/cache_protocol.md, "Writing a kind").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry.manifest import Manifest
from ..entry.validate import TVM_FFI, BinaryChecks, Rejection
from ..key import plan as plan_mod


class Kind:
    """Defaults shared by the kinds; each kind file overrides what differs."""

    name = ""
    label = ""  # "tvm-ffi module", "torch extension", ...
    report_label = ""  # the kernel table's label column ("" for the default kind)
    verbatim_flags = True  # the spec's flags are another JIT's complete lines (nothing added)
    shared = True  # linked with -shared (an executable is not)
    in_process = True  # loaded into this process (dlopen): a replaced path loads from a private copy
    stamp_binary = True  # after one sha256 check, the binary's stat stands in for its hash
    checks: BinaryChecks = TVM_FFI  # what its binary must be before any code runs (validate.BinaryChecks)
    # how kernelcache.lookup.recall loads an entry of this kind without the loader ("bind_now": dlopen
    # with every symbol resolved, then tvm_ffi.load_module; "lazy": tvm_ffi.load_module only;
    # "torch_python": import torch, then the module from its file; "torch_library": import
    # torch, then torch.ops.load_library; "path": the path handed out; "MODULE:FUNCTION": a kind
    # of its own, FUNCTION(path, name) -> what admit hands out, imported lean by recall, so it
    # must load exactly as ``admit`` does once the entry's identity was checked); None: never recalled
    recall_load: str | None = None

    def so_name(self, spec_name: str) -> str:
        return f"{spec_name}.so"

    def key_inputs(self) -> dict[str, str]:
        """What this kind adds to the keys (the default kind adds nothing: its keys predate kinds)."""
        return {"kind": self.name}

    def plan(self, spec: KernelSpec, settings: Settings) -> plan_mod.BuildPlan:
        """The exact command lines (keyed == run): the spec's flags used as given, plus what every
        kind gets (``-MD`` depfiles, the identity object). ToolchainError when a tool is missing."""
        return plan_mod.verbatim_plan(spec, settings, so_name=self.so_name(spec.name), shared=self.shared,
                                      kind_inputs=self.key_inputs())

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        """What a freshly linked binary exports: (schemas, surface) for its manifest. Judging
        it is the door's job (``admit.accept``); this raises BuildError only when the binary
        cannot be inspected at all."""
        raise NotImplementedError

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, Rejection | None]:
        """Load an entry whose file checks passed: (module or path, None) or (None, why)."""
        raise NotImplementedError

    def surface(self, path: str, name: str) -> dict:
        """The exported surface of a fresh binary, computed in the surface subprocess."""
        return {}
