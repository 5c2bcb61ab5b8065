"""Test impact selection: run only the tests a change can affect, across Python and native code.

A pytest run records, per test, the kernels it used and the repository files its tests read
(:mod:`.record`); per kernel, the sources and headers its compiler actually read (from the
manifests). That is the impact map (:mod:`.impact_map`). Later, the files changed since a
base commit (:mod:`.changes`) are matched against the map and a static Python import graph
(:mod:`.graph`) by the rules in :mod:`.select`, which run everything whenever they cannot be
sure. No pytest here: the plugin (``kernelcache.pytest_plugin.impact``), the CLI
(``kernelcache affected``) and ``ci/affected-tests`` share this package.
"""
