"""-march=native is keyed by what it expands to on the building host, the CPU features it needs
are recorded, and an entry built for features this CPU lacks is refused (local entry on a shared
cache dir, prebuilt root) with a reason that ``explain`` shows. The foreign CPU is provoked with a
forged manifest requiring a feature this CPU lacks: the entry and the refusal path are real."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from kernelcache.base.settings import Settings
from kernelcache.entry import manifest
from kernelcache.host import native

import kernelcache as kc
from kernelcache import kinds
from kernelcache.export import roots as export
from kernelcache.key import level1
from kernelcache.storage.entry import Entry
from tests.support import copy_as_fetched, project_spec

FAKE = "kc_fake_avx9000"  # a CPU feature no CPU has


def _compiler_says(cxx: str) -> str:
    """-march=native as the compiler expands it, asked independently of kernelcache."""
    proc = subprocess.run([cxx, "-march=native", "-###", "-E", "-x", "c++", "/dev/null"],
                          capture_output=True, text=True, timeout=60)
    for line in proc.stderr.splitlines():
        for tok in shlex.split(line):
            m = re.match(r"-march=(.+)", tok)
            if m and "cc1" in line:
                return m.group(1)
    pytest.skip("compiler does not report an expansion of -march=native")


def test_key_holds_the_expansion_not_the_literal_string(kc_env, project):
    s = Settings.from_env()
    spec = project_spec(project, cflags=["-march=native"])
    p = kinds.make_plan(spec, s)
    l1 = level1.level1(p, s)
    nat = l1.inputs["native"]
    cpu = _compiler_says(p.cxx)
    assert cpu != "native"
    assert f"-march={cpu}" in nat["expanded"]  # what the compiler expands it to, not the string
    assert "-march=native" not in nat["expanded"]
    assert level1.canonical_hash(l1.inputs) == l1.key  # so the expansion is part of the key
    assert set(nat["cpu_features"]) <= native.cpu_features() and nat["cpu_features"]
    plain = level1.level1(kinds.make_plan(project_spec(project), s), s)
    assert "native" not in plain.inputs and plain.key != l1.key
    # the tool-free source key (fleet index) names this CPU for a native spec only
    sk_native = kinds.source_key(spec, (), "0.1.0", s)
    sk_plain = kinds.source_key(project_spec(project), (), "0.1.0", s)
    assert sk_native != sk_plain


def test_expansion_is_memoised_per_compiler(kc_env, project, tmp_path):
    s = Settings.from_env()
    spec = project_spec(project, cflags=["-march=native"])
    kc_env.reset_counts()
    level1.level1(kinds.make_plan(spec, s), s)
    assert kc_env.compiles("other") == 1  # the compiler was asked once (-###)
    kc_env.reset_counts()
    kc.reset_process_state()
    level1.level1(kinds.make_plan(spec, s), s)  # memoised: no second -### run
    assert kc_env.compiles("other") == 0


def _forge(entry_dir, feature=FAKE):
    m = manifest.read(entry_dir)
    m.inputs["native"]["cpu_features"] = [*m.inputs["native"]["cpu_features"], feature]
    manifest.write(entry_dir, m)


def test_local_entry_for_another_cpu_is_refused_not_quarantined(kc_env, project):
    spec = project_spec(project, cflags=["-march=native"])
    assert kc.load(spec).add(2, 3) == 5
    [entry] = kc_env.entries()
    _forge(entry)  # as if a host with one more CPU feature had built it on a shared cache dir
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError) as exc:
        kc.load(spec, settings=Settings.from_env().replace(no_build=True))
    assert FAKE in str(exc.value) and "lacks" in str(exc.value)
    assert entry.exists()  # another host can still use it
    assert not (kc_env.cache / "v1" / "quarantine").exists()
    info = kc.explain(spec)
    assert info["status"] == "miss"
    assert any(FAKE in r and "illegal instruction" in r for r in info["refused"]), info["refused"]
    assert info["inputs"]["native"]["cpu_features"]
    # the CLI finds the kernel from the cache's records and says the same
    r = subprocess.run([sys.executable, "-m", "kernelcache", "explain", "adder"], env=kc_env.env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "native: -march=native -> -march=" in r.stdout and "needs CPU features:" in r.stdout
    assert any(FAKE in line and line.startswith("refused:") for line in r.stdout.splitlines()), r.stdout
    # without the forged feature the same entry is a hit
    m = manifest.read(entry)
    m.inputs["native"]["cpu_features"].remove(FAKE)
    manifest.write(entry, m)
    kc.reset_process_state()
    _, res = kc.load_with_result(spec, settings=Settings.from_env().replace(no_build=True))
    assert res.status == "hit"


def test_prebuilt_entry_for_another_cpu_is_refused(kc_env, project, tmp_path):
    spec = project_spec(project, cflags=["-march=native"])
    kc.load(spec)
    [entry] = kc_env.entries()
    root = tmp_path / "artifacts"
    dest = export.export_entry(Entry(entry, manifest.read(entry)), root, None)
    shutil.rmtree(kc_env.cache)
    s = Settings.from_env().replace(prebuilt=(root,), no_build=True)
    kc.reset_process_state()
    _, res = kc.load_with_result(spec, settings=s)
    assert res.status == "prebuilt"  # control: this CPU has every recorded feature
    _forge(dest)
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError) as exc:
        kc.load(spec, settings=s)
    assert FAKE in str(exc.value)
    info = kc.explain(spec, settings=s)
    [pre] = info["prebuilt"]
    assert not pre["usable"] and FAKE in pre["reason"] and "this CPU lacks" in pre["reason"]
    assert json.loads((dest / "manifest.json").read_text())["inputs"]["native"]["expanded"]


def test_fetched_fleet_entry_for_another_cpu_is_refused(kc_env, project):
    spec = project_spec(project, cflags=["-march=native"])
    kc.load(spec)
    [entry] = kc_env.entries()
    s = Settings.from_env().replace(no_build=True)
    dest = copy_as_fetched(entry, spec, s)
    shutil.rmtree(entry)  # only the fetched copy is left
    kc.reset_process_state()
    _, res = kc.load_with_result(spec, settings=s)
    assert res.status == "hit" and "fetched" in res.reason  # control: this CPU can run it
    _forge(dest)  # fetched from a host with one more CPU feature
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError) as exc:
        kc.load(spec, settings=s)
    assert FAKE in str(exc.value) and "lacks" in str(exc.value)
