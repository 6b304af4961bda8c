"""ProducerResults' sequence bookkeeping: up to where every numbered batch of a partition ended."""

from __future__ import annotations

import asyncio

from raykafka.actors.producer_results import ProducerResults


def first_unresolved(results: ProducerResults, numbering: int = 0) -> int:
    return asyncio.run(results.first_unresolved("t", 0, 7, numbering))


def test_the_first_unresolved_sequence_advances_only_over_batches_that_ended():
    results = ProducerResults()
    assert first_unresolved(results) == 0
    ok, failed = None, RuntimeError("gave up")
    asyncio.run(results.report([([1, 2], "t", 0, 10, -1, ok)], [("t", 0, 7, 0, 2, 2)]))  # 2-3 ended first
    assert first_unresolved(results) == 0  # 0-1 has not
    asyncio.run(results.report([([0], "t", 0, -1, -1, failed)], [("t", 0, 7, 0, 0, 2)]))  # a failure ends it too
    assert first_unresolved(results) == 4
    assert first_unresolved(results, numbering=1) == 0  # another numbering counts on its own
    assert [e[0] for e in asyncio.run(results.poll(0))] == [[1, 2], [0]]
