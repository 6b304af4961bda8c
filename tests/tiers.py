"""Which tier a test's cases run in. The default tier (`python -m pytest`, what CI runs) keeps
at least one case of every scenario's feature on the real broker and real Ray; the other cases
of a parametrized scenario run in the slow tier (`--run-slow`), so that every case still runs in
one of the two (docs/tests.md). A fuzz test (marked `fuzz`) runs in both: a fifth of its
examples in the default tier, all of them in the slow tier (`fuzz_examples`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

# the default tier runs this share of a fuzz test's examples, and never fewer than FUZZ_LEAST
FUZZ_QUICK_SHARE = 5
FUZZ_LEAST = 20


def slow_tier() -> bool:
    """Whether this run takes the slow tier too (`--run-slow`, which sets RAYKAFKA_SLOW)."""
    return os.environ.get("RAYKAFKA_SLOW", "") not in ("", "0")


def fuzz_examples(examples: int) -> int:
    """A fuzz test's `max_examples`: all `examples` in a run of the slow tier, else a fifth."""
    return examples if slow_tier() else min(examples, max(examples // FUZZ_QUICK_SHARE, FUZZ_LEAST))


def default_keeps(cases: Iterable[Any], kept: Iterable[Any]) -> list[Any]:
    """`cases` for `pytest.mark.parametrize`, those not in `kept` marked slow; ids unchanged.
    A case of several arguments is a tuple, as parametrize takes it."""
    cases, kept = list(cases), list(kept)
    if not kept or any(case not in cases for case in kept):
        raise ValueError(f"the default tier must keep some of the cases {cases}, not {kept}")
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=() if case in kept else pytest.mark.slow)
            for case in cases]
