"""Which tier a test's cases run in. The default tier (`python -m pytest`, what CI runs) keeps
at least one case of every scenario's feature on the real broker and real Ray; the other cases
of a parametrized scenario run in the slow tier (`--run-slow`), so that every case still runs in
one of the two (docs/tests.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def default_keeps(cases: Iterable[Any], kept: Iterable[Any]) -> list[Any]:
    """`cases` for `pytest.mark.parametrize`, those not in `kept` marked slow; ids unchanged.
    A case of several arguments is a tuple, as parametrize takes it."""
    cases, kept = list(cases), list(kept)
    if not kept or any(case not in cases for case in kept):
        raise ValueError(f"the default tier must keep some of the cases {cases}, not {kept}")
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=() if case in kept else pytest.mark.slow)
            for case in cases]
