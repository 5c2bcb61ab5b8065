"""Bytecode instructions one eager call of ``tree_speculative_sampling_target_only`` executes in
Python (its fast-path checks and dispatch), the tvm-ffi call replaced by a no-op. Deterministic,
so it compares code versions on a loaded machine where wall-clock figures cannot.

    python benchmarks/fastpath_opcount.py             # this checkout
    git archive 739a143 kernelcache | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python benchmarks/fastpath_opcount.py --layout globals   # before issue 18
"""
from __future__ import annotations

import argparse
import sys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", choices=("state", "globals"), default="state",
                    help="state: kernels/speculative_sampling/call.py's FastPath (issue 18); "
                         "globals: the module globals of kernels/speculative_sampling.py before it")
    args = ap.parse_args()
    import torch

    tensors = [torch.empty(1) for _ in range(11)]
    noop = lambda *a: None  # noqa: E731
    hooks = dict(is_compiling=torch.compiler.is_compiling, fn_mode_on=torch._C._is_torch_function_mode_enabled,
                 dispatch_modes=torch._C._len_torch_dispatch_stack)
    if args.layout == "state":
        from kernelcache.kernels.speculative_sampling import call

        call.fast.fn, call.fast.tensor = noop, torch.Tensor
        for k, v in hooks.items():
            setattr(call.fast, k, v)
        fn = call.tree_speculative_sampling_target_only
    else:
        from kernelcache.kernels import speculative_sampling as old

        old._fast, old._Tensor = noop, torch.Tensor
        for k, v in hooks.items():
            setattr(old, "_" + k, v)
        fn = old.tree_speculative_sampling_target_only
    fn(*tensors, 1.0, 1.0, True)
    counts: dict[str, int] = {}

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True

        def local(frame, event, arg):
            if event == "opcode":
                counts[frame.f_code.co_name] = counts.get(frame.f_code.co_name, 0) + 1
            return local
        return local

    sys.settrace(tracer)
    fn(*tensors, 1.0, 1.0, True)
    sys.settrace(None)
    print(f"{args.layout}: {sum(counts.values())} instructions per call {counts}")


if __name__ == "__main__":
    main()
