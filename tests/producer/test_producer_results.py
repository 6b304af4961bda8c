"""ProducerResults' sequence bookkeeping: up to where every numbered batch of a partition ended."""

from __future__ import annotations

import threading

from raykafka.actors.producer_results import NumberedBatch, ProducerResults


def first_unresolved(results: ProducerResults, numbering: int = 0) -> int:
    return results.first_unresolved("t", 0, 7, numbering)


def test_the_first_unresolved_sequence_advances_only_over_batches_that_ended():
    results = ProducerResults()
    assert first_unresolved(results) == 0
    ok, failed = None, RuntimeError("gave up")
    results.report([([1, 2], "t", 0, 10, -1, ok)], [("t", 0, 7, 0, 2, 2)])  # 2-3 ended first
    assert first_unresolved(results) == 0  # 0-1 has not
    results.report([([0], "t", 0, -1, -1, failed)], [("t", 0, 7, 0, 0, 2)])  # a failure ends it too
    assert first_unresolved(results) == 4
    assert first_unresolved(results, numbering=1) == 0  # another numbering counts on its own
    assert [e[0] for e in results.poll(0).outcomes] == [[1, 2], [0]]


def test_a_poll_wakes_on_the_first_report_and_takes_everything_since():
    results = ProducerResults()
    assert results.poll(0.01) == ([], [])
    got: list = []
    poller = threading.Thread(target=lambda: got.append(results.poll(60)))
    poller.start()
    results.report([([5, 6], "t", 1, 30, -1, None)])
    poller.join(20)
    assert not poller.is_alive()  # woken by the report, not by its 60 s timeout
    assert got == [([([5, 6], "t", 1, 30, -1, None)], [])] and results.reported == 2
    assert results.poll(0) == ([], [])


def test_numbered_batches_are_handed_over_with_the_next_poll_once():
    """A LeaderDispatcher's notes of what it numbered reach the driver with the outcomes."""
    results = ProducerResults()
    note = NumberedBatch("t", 2, 7, 0, 40, range(100, 103), 1_700_000_000_000)
    results.numbered([note])
    results.report([([9], "t", 0, 5, -1, None)])
    assert results.poll(0) == ([([9], "t", 0, 5, -1, None)], [note])
    assert results.poll(0) == ([], [])
