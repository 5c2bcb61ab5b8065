"""The ``kernelcache_specs`` of a pytest project, read without pytest (``build --from-ini``).

The CLI must not import pytest (only ``pytest_plugin`` does), so the ini file is found the way
pytest finds it for a run started in this directory: the first of ``pytest.ini``,
``pyproject.toml`` (``[tool.pytest.ini_options]``), ``tox.ini`` (``[pytest]``) and ``setup.cfg``
(``[tool:pytest]``) that holds pytest's section, here or in a parent directory.
"""
from __future__ import annotations

import configparser
from pathlib import Path

KEY = "kernelcache_specs"


def _split(value: object) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return str(value or "").split()


def _read(path: Path) -> list[str] | None:
    """The key's entries, [] for a pytest ini without it, None when the file is no pytest ini."""
    if path.name == "pyproject.toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise ValueError(f"{path}: reading pyproject.toml needs Python 3.11 (tomllib); pass --spec") from None
        try:
            opts = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options")
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot read it: {e}") from None
        return None if opts is None else _split(opts.get(KEY))
    section = {"pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}[path.name]
    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read(path)
    except configparser.Error as e:
        raise ValueError(f"{path}: cannot read it: {e}") from None
    if not cp.has_section(section):
        return [] if path.name == "pytest.ini" else None  # pytest.ini is pytest's even when empty
    return _split(cp.get(section, KEY, fallback=""))


def ini_spec_refs(start: Path) -> tuple[Path, list[str]]:
    """(the ini file, its ``kernelcache_specs`` entries) of the project ``start`` is in."""
    for d in [start.resolve(), *start.resolve().parents]:
        for name in ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            if (d / name).is_file():
                refs = _read(d / name)
                if refs is not None:
                    return d / name, refs
    raise ValueError(f"no pytest ini file (pytest.ini, pyproject.toml, tox.ini, setup.cfg) at or above {start}")
