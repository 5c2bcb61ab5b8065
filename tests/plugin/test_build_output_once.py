"""A failing build's compiler output is printed once (kernelcache section of the summary); each
test that needed the kernel references it instead of repeating it (also under xdist)."""
from __future__ import annotations

import pytest

TESTS = "import pytest\n" + "".join(f'''
@pytest.mark.kernel("kc_broken")
def test_broken_{i}(kc_kernel):
    pass
''' for i in range(4)) + '''
def test_plain():
    pass
'''

COMPILER_LINE = "expected primary-expression"  # g++'s diagnostic for broken.cc


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_compiler_output_is_printed_once(kcp_shared, xdist):
    kcp_shared.pytester.makeini("[pytest]\nkernelcache_specs = kcspecs:broken_specs\n")
    kcp_shared.pytester.makepyfile(test_k=TESTS)
    args = ["-p", "xdist", "-n", "2"] if xdist else []
    r = kcp_shared.run(*args, "-p", "kernelcache", "-p", "no:cacheprovider")
    assert r.ret == 1
    r.assert_outcomes(passed=1, errors=4)
    out = r.stdout.str()
    assert out.count(COMPILER_LINE) == 1, out
    # each test's error names the kernel, the first line of the failure, and where the output is
    # (counted in the error reports; the short summary repeats them in full when CI is set)
    reports = "\n".join(line for line in out.splitlines() if not line.startswith("ERROR "))
    assert reports.count("kernel 'kc_broken' is unavailable: BuildError: building kernel 'kc_broken' failed") == 4
    assert reports.count("full compiler output: kernelcache section of the summary") == 4
    summary = out[out.index("= kernelcache ="):]
    assert COMPILER_LINE in summary and "kc_broken" in summary
