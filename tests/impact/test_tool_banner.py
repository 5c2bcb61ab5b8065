"""A kernel's environment identity from a manifest whose tool version is recorded as lines.

Found by the report-mode run of this repository's whole suite: recording the impact map while
tests/loader/test_place_order.py ran (its manifests record a tool's version as a list) raised
AttributeError in the plugin's recorder, an error in two tests that pass without recording."""
from kernelcache.impact.environment import _version_line


def test_a_banner_recorded_as_lines_reads_like_one_banner():
    banner = "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc."
    assert _version_line("c++", banner.splitlines()) == _version_line("c++", banner) == "gcc (Debian 12.2.0-14) 12.2.0"
    assert _version_line("nvcc", ["nvcc: NVIDIA", "Cuda compilation tools, release 13.0"]) == \
        "Cuda compilation tools, release 13.0"
    assert _version_line("c++", None) == _version_line("c++", []) == "?"
