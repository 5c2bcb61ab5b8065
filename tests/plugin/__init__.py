"""Tests of the pytest plugin (a package, so its conftest does not take the `conftest` module name)."""
