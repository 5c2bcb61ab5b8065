"""A FlashInfer module that names a template instantiation it leaves out still loads through the route.

FlashInfer's batch prefill FA2 module dispatches a ``CTA_TILE_Q`` its instantiation template leaves
out as unreachable; FlashInfer loads lazily, so the module runs. A bind-now load check rejected
it on the H200 ("undefined symbol"). The module here has the same shape in a few lines.
"""
from __future__ import annotations

import json

from .conftest import FiEnv

SOURCE = r"""
#include <tvm/ffi/function.h>
#include <cstdint>
namespace kc_probe { template <int N> int64_t tile(); }  // declared, never instantiated
int64_t kc_pick(int64_t t) {
  if (t == 32) return kc_probe::tile<32>();  // a dispatch case never taken
  return t;
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(pick, kc_pick);
"""

LOAD = """
import json
from flashinfer.jit.core import gen_jit_spec
spec = gen_jit_spec("kc_lazy_probe", [{src!r}])
mod = spec.build_and_load()
print(json.dumps({{"pick": int(mod.pick(7)), "library": str(spec.get_library_path())}}))
"""


def test_a_module_naming_an_unreachable_instantiation_loads_as_flashinfer_loads_it(fi: FiEnv) -> None:
    src = fi.tmp / "lazy" / "kc_lazy_probe.cu"
    src.parent.mkdir(exist_ok=True)
    src.write_text(SOURCE)
    before = fi.links()
    out = fi.run(fi.tmp / "ws-lazy", code=LOAD.format(src=str(src)), check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["pick"] == 7 and got["library"].startswith(str(fi.cache)) and fi.links() == before + 1
