"""The chaos suite's own accounting, without Ray or a broker: the Ledger's checks against a log
(report.py's rendering: test_report.py)."""

from __future__ import annotations

from concurrent.futures import Future

from raykafka.driver.producer import RecordMetadata


def delivered(partition: int, offset: int) -> Future:
    future: Future = Future()
    future.set_result(RecordMetadata("t", partition, offset, 0))
    return future


def failed(error: Exception) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future


def test_a_success_reported_without_an_offset_is_a_failure_of_accounting(ledger):
    """With acks other than 0 a delivered message has an offset; one reported with -1 cannot be
    checked against the log, so it counts as lost (it used to pass unseen)."""
    ledger.values = [b"a", b"b", b"c"]
    ledger.futures = [delivered(0, 0), delivered(0, -1), delivered(0, 2)]
    assert ledger.settle(1)["delivered"] == 3
    log = {0: [(0, b"a"), (1, b"b"), (2, b"c")]}
    checks = ledger.check_log(log)
    assert checks["lost"] == 1 and checks["without_offset"] == 1
    # with acks=0 no offset is given: the message need only be in the log
    assert ledger.check_log(log, acks=0)["lost"] == 0
    assert ledger.check_log({0: [(0, b"a"), (2, b"c")]}, acks=0)["lost"] == 1


def test_the_ledger_counts_what_the_log_shows(ledger):
    ledger.values = [b"a", b"b", b"c", b"d", b"e"]
    ledger.futures = [delivered(0, 0), delivered(0, 1), delivered(1, 0), delivered(1, 5), failed(ValueError("x"))]
    ledger.settle(1)
    log = {0: [(0, b"a"), (1, b"b"), (2, b"a")], 1: [(0, b"c"), (1, b"e"), (2, b"d")]}
    checks = ledger.check_log(log)
    assert checks == {"lost": 1, "duplicated": 1, "reordered": 1, "failed_but_written": 1, "without_offset": 0}
    only = ledger.check_log(log, only=range(2))  # a and b alone
    assert only == {"lost": 0, "duplicated": 1, "reordered": 0, "failed_but_written": 0, "without_offset": 0}

