"""The pytest plugin: ``pytest -p kernelcache`` (this package is the ``pytest11`` entry point).

Installed, the plugin is autoloaded, but unless it is asked for (``-p kernelcache``,
``kernelcache_enable = true``, ``KERNELCACHE_PLUGIN=1``) it only registers its options and
markers. Asked for, it resolves its options (ini < ``KERNELCACHE_*`` environment < command line
< marker) into one :class:`kernelcache.base.settings.Settings` that it passes to the loader, probes
GPUs once, warms the declared kernels once per session (also under xdist), gates GPU tests,
and reports per kernel (terminal, ``--kc-report-json``, GitHub step summary).

Layout, one job per module: :mod:`.options` (the option table and precedence),
:mod:`.activation` (asked for or merely installed), :mod:`.settings_bridge` (options ->
Settings; the single environment export for test subprocesses), :mod:`.gating` (GPU markers),
:mod:`.kernels` (specs, warming, loads in tests), :mod:`.outcomes` (per-test records),
:mod:`.report`, :mod:`.xdist`, :mod:`.names` (``--kc-run`` name resolution, static marker
reading), :mod:`.placement` (``--kc-placed``: deselect tests placed on another CI runner),
:mod:`.session` (the active plugin's hooks) and :mod:`.hooks` (the module-level hooks,
re-exported here because pytest registers this module).

Only this package imports pytest, and only through :mod:`.hooks`: ``names`` is plain Python, so
``ci/rerun-test`` can resolve names on a machine without pytest — hence the guarded import.
"""
from __future__ import annotations

try:
    import pytest  # noqa: F401
except ImportError:  # imported for .names alone (ci/rerun-test); the hooks need pytest
    pass
else:
    from .hooks import (
        pytest_addoption,
        pytest_configure,
        pytest_load_initial_conftests,
        pytest_report_header,
        pytest_unconfigure,
    )

    __all__ = ["pytest_addoption", "pytest_configure", "pytest_load_initial_conftests", "pytest_unconfigure"]
