"""The parity table's extensions and the calls made through each side (run in fresh processes).

``python parity_cases.py SIDE CASE WORKDIR`` loads CASE through plain torch (SIDE=torch) or the
drop-in (SIDE=dropin), makes the same calls (good and bad arguments) and prints one JSON line:
attribute names, results, and exception types with their first message line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CALC_H = "#pragma once\n#define CALC_OFFSET 0.5\n"
CALC_CPP = r"""
#include <cmath>
#include <stdexcept>
#include <pybind11/pybind11.h>
#include "calc_config.h"
namespace py = pybind11;
double hyp(double a, double b) { return std::hypot(a, b) * CALC_SCALE + CALC_OFFSET; }
int strict_positive(int v) { if (v <= 0) throw std::invalid_argument("value must be positive"); return v; }
struct Acc { double total = 0; void add(double v) { total += v; } };
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "parity calc";
  m.def("hyp", &hyp, py::arg("a"), py::arg("b"));
  m.def("strict_positive", &strict_positive);
  py::class_<Acc>(m, "Acc").def(py::init<>()).def("add", &Acc::add).def_readonly("total", &Acc::total);
}
"""
INLINE_CPP = r"""
torch::Tensor scale(torch::Tensor x, double factor) { return x * factor; }
torch::Tensor checked(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 1, "expected a 1-d tensor, got ", x.dim(), " dims");
  return x.flip(0);
}
"""
LIBRARY_CPP = r"""
#include <ATen/core/Tensor.h>
#include <torch/library.h>
at::Tensor twice(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "twice expects a floating tensor");
  return x.mul(2);
}
TORCH_LIBRARY(kcparity, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(kcparity, CPU, m) { m.impl("twice", &twice); }
"""
MAIN_CPP = r"""
#include <cstdio>
int main(int argc, char** argv) { std::printf("standalone %d %s\n", argc, argc > 1 ? argv[1] : "-"); return 3; }
"""
CUDA_CU = r"""
#include <torch/extension.h>
__global__ void add_one_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "add_one expects a float CUDA tensor");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int n = xc.numel();
  add_one_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""


def write_sources(work: Path) -> None:
    (work / "inc").mkdir(parents=True, exist_ok=True)
    (work / "inc" / "calc_config.h").write_text(CALC_H)
    for name, text in (("calc.cpp", CALC_CPP), ("twice.cpp", LIBRARY_CPP), ("main.cpp", MAIN_CPP),
                       ("add_one.cu", CUDA_CU)):
        (work / name).write_text(text)


def args(case: str, work: Path) -> dict:
    """The load/load_inline arguments of each case (the same on both sides)."""
    if case == "calc":
        return dict(name="kc_parity_calc", sources=[str(work / "calc.cpp")], extra_cflags=["-DCALC_SCALE=3"],
                    extra_include_paths=[str(work / "inc")], extra_ldflags=["-Wl,--no-as-needed", "-lm"])
    if case == "inline":
        return dict(name="kc_parity_inline", cpp_sources=INLINE_CPP, functions=["scale", "checked"])
    if case == "library":
        return dict(name="kc_parity_library", sources=[str(work / "twice.cpp")], is_python_module=False)
    if case == "standalone":
        return dict(name="kc_parity_exe", sources=[str(work / "main.cpp")], is_python_module=False,
                    is_standalone=True)
    if case == "cuda":
        return dict(name="kc_parity_cuda", sources=[str(work / "add_one.cu")])
    raise ValueError(case)


def _call(fn, *a, **kw):
    try:
        value = fn(*a, **kw)
    except Exception as e:  # noqa: BLE001 - the exception type is the observation
        return {"raises": type(e).__name__, "message": (str(e).splitlines() or [""])[0][:80]}
    if hasattr(value, "tolist"):
        return {"value": value.tolist(), "dtype": str(value.dtype)}
    return {"value": value}


def run(case: str, ce, work: Path) -> dict:
    import torch

    a = args(case, work)
    if case == "inline":
        mod = ce.load_inline(**a)
    else:
        mod = ce.load(**a)
    out: dict = {"type": type(mod).__name__}
    if case == "calc":
        acc = mod.Acc()
        acc.add(2.0)
        acc.add(1.5)
        out.update(attrs=sorted(n for n in dir(mod) if not n.startswith("__")), doc=mod.__doc__,
                   hyp=_call(mod.hyp, 3.0, 4.0), hyp_kw=_call(mod.hyp, b=4.0, a=3.0), hyp_bad=_call(mod.hyp, "x", 1),
                   positive=_call(mod.strict_positive, 5), negative=_call(mod.strict_positive, -1),
                   acc_total=acc.total, acc_attrs=sorted(n for n in dir(mod.Acc) if not n.startswith("__")),
                   readonly=_call(setattr, acc, "total", 1.0), name=mod.__name__)
    elif case == "inline":
        x = torch.arange(4, dtype=torch.float32)
        out.update(attrs=sorted(n for n in dir(mod) if not n.startswith("__")), doc=mod.scale.__doc__,
                   scale=_call(mod.scale, x, 2.5), checked=_call(mod.checked, x),
                   checked_bad=_call(mod.checked, x.reshape(2, 2)), scale_bad=_call(mod.scale, "x", 1.0),
                   name=mod.__name__)
    elif case == "library":
        out.update(is_file=os.path.isfile(mod), basename=os.path.basename(mod),
                   twice=_call(torch.ops.kcparity.twice, torch.tensor([1.0, 2.5])),
                   twice_int=_call(torch.ops.kcparity.twice, torch.tensor([1, 2])),
                   twice_bad=_call(torch.ops.kcparity.twice, 3))
    elif case == "standalone":
        proc = subprocess.run([mod, "arg"], capture_output=True, text=True, timeout=60)
        out.update(basename=os.path.basename(mod), stdout=proc.stdout, returncode=proc.returncode)
    elif case == "cuda":
        x = torch.arange(5, dtype=torch.float32, device="cuda")
        out.update(add_one=_call(mod.add_one, x), cpu_bad=_call(mod.add_one, torch.ones(2)))
    return out


def main() -> None:
    side, case, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    import torch  # noqa: F401

    if side == "torch":
        from torch.utils import cpp_extension as ce
    else:
        from kernelcache import cpp_extension as ce
    print("RESULT " + json.dumps(run(case, ce, work)), flush=True)


if __name__ == "__main__":
    main()
