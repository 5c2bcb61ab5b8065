"""The house rules, checked on the code: import contracts, the one reader and the one writer."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "kernelcache"


def _py_files():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _kc_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("KERNELCACHE_")


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed (it is in the [test] extra)")
    proc = subprocess.run([exe], cwd=PKG.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_only_settings_reads_kernelcache_variables():
    offenders = []
    for path in _py_files():
        if path.name in ("settings.py", "environ.py") and path.parent == PKG:  # environ.py: the raw facts
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            reads = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if (_is_environ(f.value) and f.attr in ("get", "pop", "setdefault")) or (
                        isinstance(f.value, ast.Name) and f.value.id == "os" and f.attr == "getenv"):
                    reads = node.args[:1]
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                reads = [node.slice]
            elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
                reads = [node.left]
            if any(_kc_literal(r) for r in reads):
                offenders.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert offenders == [], "KERNELCACHE_* read outside settings.py: " + ", ".join(offenders)


def test_os_environ_is_written_in_one_place_only():
    """No module steers the loader through the environment; the plugin's export is the exception."""
    writers = set()
    for path in _py_files():
        for node in ast.walk(ast.parse(path.read_text())):
            target = None
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript) and _is_environ(t.value)), None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_environ(node.func.value):
                target = node if node.func.attr in ("update", "pop", "setdefault", "clear", "__setitem__") else None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "putenv", "unsetenv") and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                target = node
            if target is not None:
                writers.add(str(path.relative_to(PKG.parent)))
    assert len(writers) <= 1 and all(w.startswith("kernelcache/pytest_plugin/") for w in writers), writers


def test_modules_stay_small():
    big = {str(p.relative_to(PKG.parent)): n for p in _py_files() if (n := len(p.read_text().splitlines())) > 420}
    assert big == {}, big


def test_shipped_kernels_read_no_environment():
    """Kernels take settings (``kernels.configure`` / ``spec(settings)``): no ``os.environ``,
    ``os.getenv`` or ``Settings.from_env`` under kernelcache/kernels/."""
    offenders = []
    for path in sorted((PKG / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (_is_environ(node) or (isinstance(node, ast.Attribute) and node.attr in ("getenv", "from_env"))):
                offenders.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert offenders == [], "environment read under kernels/: " + ", ".join(offenders)


def test_every_shipped_kernel_has_the_same_shape_and_takes_settings(tmp_path):
    import inspect

    import kernelcache as kc
    from kernelcache import kernels

    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path)})
    for name, package in kernels.KERNEL_PACKAGES.items():
        d = PKG.parent / Path(*package.split("."))
        assert {"__init__.py", "spec.py", "checks.py", "call.py"} <= {p.name for p in d.glob("*.py")}, name
        spec_mod = __import__(package + ".spec", fromlist=["spec"])
        assert "settings" in inspect.signature(spec_mod.spec).parameters, name
    try:
        import importlib.util

        if importlib.util.find_spec("flashinfer") is None:
            pytest.skip("flashinfer headers are not installed")
        specs = kernels.shipped_specs(settings=s)
    except kc.ToolchainError as e:
        pytest.skip(f"a shipped kernel's headers are missing here: {e}")
    assert set(specs) == set(kernels.shipped_kernel_names())


def test_kernels_use_the_configured_settings(tmp_path):
    """``kernels.configure(s)``: a spec finds its headers through ``s``, not the environment."""
    import kernelcache as kc
    from kernelcache import kernels
    from kernelcache.kernels.speculative_sampling import flashinfer_include_dir

    (tmp_path / "flashinfer").mkdir()
    (tmp_path / "flashinfer" / "sampling.cuh").write_text("// stub\n")
    s = kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c"), "KERNELCACHE_FLASHINFER_INCLUDE": str(tmp_path)})
    try:
        kernels.configure(s)
        assert kernels.configured() is s and flashinfer_include_dir() == str(tmp_path.resolve())
        with pytest.raises(TypeError, match="Settings or None"):
            kernels.configure({"cache_dir": "x"})
    finally:
        kc.reset_process_state()
    assert kernels.configured() is None
