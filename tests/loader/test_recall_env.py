"""The recall digest's view of ``KERNELCACHE_*`` (``environ.kc_items``) against what the settings mean.

What it leaves out must mean what unset means: every spelling ``environ.SAME_AS_UNSET`` drops and
every empty value read as ``Settings`` reads it gives the default settings; and every default a
pytest run exports for its test processes (``Settings.to_env``) is either no answer's business
(``environ.NOT_AN_ANSWER``) or dropped, so that run and a plain one fingerprint alike.
"""
from __future__ import annotations

import pytest
from kernelcache.base import environ
from kernelcache.base.settings import Settings

DEFAULTS = Settings.from_env({})
EXPORTED = DEFAULTS.to_env()


@pytest.mark.parametrize("name", sorted(set(EXPORTED) | set(environ.SAME_AS_UNSET)))
def test_what_the_digest_drops_means_unset(name):
    for value in ("", *environ.SAME_AS_UNSET.get(name, ())):
        if name not in environ.NOT_AN_ANSWER:
            assert environ.kc_items({name: value}) == []
            assert Settings.from_env({name: value}) == DEFAULTS, (name, value)


def test_the_exported_defaults_fingerprint_as_nothing():
    assert environ.kc_items(EXPORTED) == []
    assert environ.kc_items({**EXPORTED, "KERNELCACHE_LOG": "/tmp/x.jsonl"}) == []


def test_what_can_change_an_answer_stays():
    for name, value in (("KERNELCACHE_CUDA_ARCH", "9.0"), ("KERNELCACHE_PREBUILT", "/r"),
                        ("KERNELCACHE_NO_BUILD", "1"), ("KERNELCACHE_PREBUILT_VERIFY_KEYS", "/k.pub"),
                        ("KERNELCACHE_STRICT_DIRS", "1"), ("KERNELCACHE_CACHE_BUSTER", "x")):
        assert environ.kc_items({name: value}) == [(name, value)]
