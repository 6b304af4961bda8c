"""The producer's ledger and accumulator alone, without Ray: every message ends once, the bytes
buffer.memory bounds come back to zero, and send's buffers become batches in order."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from raykafka.actors.producer_results import Outcome
from raykafka.driver.accumulator import FLUSH_MESSAGES, Accumulator
from raykafka.driver.producer_ledger import Ledger, RecordMetadata
from raykafka.wire.errors import MessageTooLargeError, ProducerClosedError


def single(ledger: Ledger, size: int = 10) -> tuple[int, Future]:
    future: Future = Future()
    ledger.reserve(size)
    return ledger.add(future, "t", 1000, size), future


def test_singles_end_once_with_offsets_and_their_bytes_come_back():
    ledger = Ledger()
    (a, fa), (b, fb), (c, fc) = single(ledger), single(ledger), single(ledger)
    assert (a, b, c) == (0, 1, 2) and len(ledger) == 3 and ledger.unresolved_bytes == 30
    settled = ledger.settle([Outcome(range(0, 2), "t", 4, 100, 5000)])
    assert [(f, meta) for f, meta, _ in settled] == [(fa, RecordMetadata("t", 4, 100, 5000)),
                                                     (fb, RecordMetadata("t", 4, 101, 5000))]
    error = ProducerClosedError("closed")
    again = ledger.settle([Outcome.failed([1, 2], error)])  # 1 ended already: skipped
    assert again == [(fc, None, error)]
    assert len(ledger) == 0 and not ledger and ledger.unresolved_bytes == 0


def test_a_batch_ends_when_its_last_record_does_and_keeps_each_records_place():
    ledger = Ledger()
    _, before = single(ledger)
    future: Future = Future()
    ledger.reserve(50)
    state = ledger.add_batch(5, future, 50)
    assert state.start == 1 and ledger.next_id == 6 and len(ledger) == 6
    ledger.settle([Outcome([1, 3, 5], "t", 2, 40)])
    assert not ledger.take_finished() and len(ledger) == 3
    error = MessageTooLargeError("too large")
    ledger.fail_in_batch(state, np.array([1]), error, np.full(5, 10))
    settled = ledger.settle([Outcome([0, 4], "t", 0, 7)])
    assert settled == [(before, RecordMetadata("t", 0, 7, 1000), None)]  # no time given: the send's
    (done,) = ledger.take_finished()
    result = done.result()
    assert (result.delivered, result.failed) == (4, 1)
    assert result.offsets.tolist() == [40, -1, 41, 8, 42] and result.errors[1] is error
    assert result.partitions.tolist() == [2, -1, 2, 0, 2]
    assert not ledger and ledger.unresolved_bytes == 0


def test_unresolved_before_a_cutoff_in_groups():
    ledger = Ledger()
    single(ledger)
    ledger.add_batch(3, Future(), 30)
    single(ledger)
    ledger.settle([Outcome([2], "t", 0, 0)])
    assert ledger.unresolved_before(None) == [[0, 4], [1, 3]]
    assert ledger.unresolved_before(3) == [[0], [1]]


def test_the_accumulator_wakes_the_sender_when_a_buffer_opens_and_when_it_is_full():
    acc = Accumulator()
    wakes = [acc.add("a" if i % 2 else "b", (i, b"v", None, 1, None, -1), 10) for i in range(FLUSH_MESSAGES)]
    assert wakes[0] and wakes[-1] and not any(wakes[1:-1]) and acc.full
    batches = acc.take()
    assert [b.topic for b in batches] == ["b", "a"]  # in the order the topics were first sent to
    assert list(batches[0].ids) == list(range(0, FLUSH_MESSAGES, 2))
    assert acc.count == acc.nbytes == 0 and not acc.open and not acc.ready


def test_dropping_the_accumulator_names_every_message_it_held_and_seals_nothing(monkeypatch):
    """At a close (or Ray gone), what is still gathered fails: `drop` says which messages, a ready
    batch's and an open buffer's, without sealing the open ones (no columns built, nothing put in
    Ray's object store, which may be gone)."""
    from raykafka.driver import accumulator

    acc = Accumulator()
    for i in range(3):
        acc.add("a", (i, b"v", None, 1, None, -1), 10)
    acc.seal()
    acc.add("b", (3, b"w", None, 1, None, -1), 10)
    monkeypatch.setattr(accumulator, "shared", lambda values: pytest.fail("sealed while dropped"))
    held = acc.drop()
    assert [(topic, list(ids)) for topic, ids in held] == [("a", [0, 1, 2]), ("b", [3])]
    assert acc.count == acc.nbytes == 0 and not acc.open and not acc.ready


def test_a_batch_result_prints_as_one_short_line_its_counts_and_first_errors():
    from raykafka.driver.producer_ledger import REPR_ERRORS, BatchResult

    n = 1000
    errors: list = [None] * n
    for i in (7, 8, 9, 500, 999):
        errors[i] = MessageTooLargeError(f"record {i} too large")
    result = BatchResult(n - 5, 5, np.zeros(n, np.int32), np.zeros(n, np.int64), errors)
    text = repr(result)
    assert "\n" not in text and len(text) < 300, text
    assert text.startswith("BatchResult(delivered=995, failed=5, errors=[[7] MessageTooLargeError: record 7 too large")
    assert text.count("MessageTooLargeError") == REPR_ERRORS and text.endswith("; ...])")
    clean = BatchResult(n, 0, np.zeros(n, np.int32), np.zeros(n, np.int64), [None] * n)
    assert repr(clean) == "BatchResult(delivered=1000, failed=0)"
