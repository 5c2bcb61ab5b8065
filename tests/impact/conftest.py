"""A zygote (pytest and tvm-ffi imported once, one fork per run) shared by the impact tests
that run many full sessions of a generated project."""
from __future__ import annotations

from typing import Iterator

import pytest

from .project import Zygote


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.stop()
