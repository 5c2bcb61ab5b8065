"""Placeholder replaced below."""
from __future__ import annotations


def apply(spec, settings):
    return spec
