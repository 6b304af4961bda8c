"""The hot-path bench runs against today's Producer (its stand-in producer has every field `send`
and `_resolve` touch). Not a timed test: it checks that every path runs and gives a rate."""

from __future__ import annotations

import math

from raykafka.app.bench import hot_paths


def test_every_hot_path_runs_and_gives_a_positive_rate():
    rows = hot_paths.measure(runs=1)
    assert len(rows) >= 5
    for row in rows:
        assert math.isfinite(row["now"]) and row["now"] > 0, row
