"""RemoteSettings: one record for the fleet cache's knobs; the default-mode rule stated once and
used alike by the environment, the CLI's global flags and the pytest plugin's options."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
from kernelcache.base.settings import RemoteSettings, Settings


@pytest.mark.parametrize("url,mode,expected", [
    (None, None, "off"), ("file:///x", None, "read"), ("file:///x", "readwrite", "readwrite"),
    ("file:///x", "OFF", "off"), (None, "readwrite", "off"), ("  ", "read", "off"),
])
def test_the_default_mode_rule(url, mode, expected):
    r = RemoteSettings(url, mode)
    assert r.mode == expected
    assert r.enabled == (expected != "off") and r.writable == (expected == "readwrite")


@pytest.mark.parametrize("kw,match", [({"mode": "write"}, "KERNELCACHE_REMOTE_MODE"),
                                      ({"timeout": 0}, "KERNELCACHE_REMOTE_TIMEOUT"),
                                      ({"lease_ttl": -1}, "KERNELCACHE_REMOTE_LEASE_TTL"),
                                      ({"wait": float("nan")}, "KERNELCACHE_REMOTE_WAIT")])
def test_bad_values_are_refused_on_construction(kw, match):
    with pytest.raises(ValueError, match=match):
        RemoteSettings("file:///x", **kw)


def test_frozen_and_nested_in_settings(tmp_path):
    s = Settings(cache_dir=tmp_path, lock_dir=tmp_path, remote=RemoteSettings("s3://b/p", "readwrite", timeout=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.remote.mode = "read"  # type: ignore[misc]
    assert s.remote_enabled and s.remote_writable  # the shortcuts
    assert not s.replace(remote=s.remote.replace(mode="read")).remote_writable
    with pytest.raises(TypeError, match="RemoteSettings"):
        Settings(cache_dir=tmp_path, lock_dir=tmp_path, remote="s3://b/p")  # type: ignore[arg-type]


def test_command_line_values_layer_over_the_environment_before_the_rule(tmp_path):
    env = {"KERNELCACHE_DIR": str(tmp_path), "KERNELCACHE_REMOTE_MODE": "readwrite"}
    assert Settings.from_env(env).remote.mode == "off"  # a mode alone shares nothing
    assert Settings.from_env(env, remote_url="file:///x").remote.mode == "readwrite"  # the env's mode applies
    env2 = {"KERNELCACHE_DIR": str(tmp_path), "KERNELCACHE_REMOTE": "file:///env"}
    assert Settings.from_env(env2).remote == RemoteSettings("file:///env", "read")
    assert Settings.from_env(env2, remote_mode="off").remote.mode == "off"
    assert Settings.from_env(env2, remote_url="file:///cli").remote.url == "file:///cli"


def test_env_and_wire_round_trip(tmp_path):
    r = RemoteSettings("s3://b/p", "readwrite", signing_key=tmp_path / "k.pem",
                       verify_keys=(tmp_path / "a.pub", tmp_path / "b.pub"), timeout=2.5, lease_ttl=30, wait=0)
    s = Settings(cache_dir=tmp_path / "c", lock_dir=tmp_path / "l", remote=r)
    assert Settings.from_env(s.to_env()).remote == r
    wire = json.loads(json.dumps(s.to_wire()))  # what xdist's workerinput and the JSON report carry
    assert wire["remote"] == "s3://b/p" and wire["remote_mode"] == "readwrite"  # the flat names users know
    assert Settings.from_wire(wire) == s


def test_cli_and_plugin_use_the_same_rule(tmp_path, monkeypatch):
    """The CLI's global flags and the plugin's options go through RemoteSettings, not a copy."""
    from kernelcache.cli.common import settings_of

    monkeypatch.setenv("KERNELCACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELCACHE_REMOTE_MODE", "readwrite")
    monkeypatch.delenv("KERNELCACHE_REMOTE", raising=False)
    ns = argparse.Namespace(remote="file:///x", remote_mode=None, cache_dir=str(tmp_path / "other"))
    s = settings_of(ns)
    assert s.remote == RemoteSettings("file:///x", "readwrite") and s.cache_dir == tmp_path / "other"
    monkeypatch.delenv("KERNELCACHE_REMOTE_MODE")
    assert settings_of(argparse.Namespace(remote="file:///x", remote_mode=None)).remote.mode == "read"
    assert settings_of(argparse.Namespace(remote=None, remote_mode="readwrite")).remote.mode == "off"

    from kernelcache.pytest_plugin.settings_bridge import build_settings

    opts = {"remote": ("file:///y", "cli"), "remote_mode": (None, "default")}
    from kernelcache.pytest_plugin.options import OPTIONS

    for o in OPTIONS:
        opts.setdefault(o.dest, (None, "default"))
    s, _ = build_settings(opts)
    assert s.remote == RemoteSettings("file:///y", "read")
    assert Path(s.cache_dir) == tmp_path
