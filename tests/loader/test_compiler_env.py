"""Environment variables that change what the compiler produces without appearing on its command
line are part of the key (``base.warm_facts.COMPILER_ENV``), so an entry built under one value is
not served under another.

The real fault: GCC takes ``__DATE__`` from ``SOURCE_DATE_EPOCH`` when it is set (reproducible
builds); a kernel built with the epoch of 1970 and loaded with one of 1971 answered 1970's year.
"""
from __future__ import annotations

import json

SRC = """#include <tvm/ffi/function.h>
int64_t year_digit() { return __DATE__[10] - '0'; }  // "Mmm dd yyyy": the year's last digit
TVM_FFI_DLL_EXPORT_TYPED_FUNC(year_digit, year_digit);
"""

LOAD = """
import json
import kernelcache as kc
spec = kc.KernelSpec(name="dated", sources=["dated.cc"], root={root!r}, functions={{"year_digit": "Callable[[], int]"}})
print(json.dumps(kc.load(spec).year_digit()))
"""


def test_source_date_epoch_is_keyed(kc_env, tmp_path):
    (tmp_path / "dated.cc").write_text(SRC)

    def year(epoch: int) -> int:
        out = kc_env.run_py(LOAD.format(root=str(tmp_path)), cwd=kc_env.tmp, SOURCE_DATE_EPOCH=str(epoch))
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert year(0) == 0  # 1970
    assert year(0) == 0 and kc_env.compiles() == 1  # a hit (recalled)
    assert year(366 * 86400) == 1  # 1971: another key, built
    assert kc_env.compiles() == 2
    assert year(0) == 0 and kc_env.compiles() == 2  # both entries stay usable
