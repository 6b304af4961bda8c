"""The chaos suite's own accounting, without Ray or a broker: the Ledger's checks against a log,
and how report.py renders figures a scenario did not measure."""

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


def _report_module():
    import report  # beside this file (tests/chaos/conftest.py)

    return report


def test_the_report_leaves_a_figure_not_measured_blank_and_out_of_the_totals():
    report = _report_module()
    measured = {"test": "test_a", "module": "test_producer_mock_chaos", "sent": 10, "delivered": 10, "failed": 0,
                "unresolved": 0, "lost": 0, "reordered": 0, "duplicated": 0, "failed_but_written": 0}
    unmeasured = {"test": "test_b", "module": "test_corrupt_batch", "sent": 5, "delivered": 4, "failed": None,
                  "unresolved": None, "lost": None, "reordered": 2, "duplicated": None, "failed_but_written": None}
    text = report.render([measured, unmeasured])
    row = next(line for line in text.splitlines() if line.startswith("| corrupt_batch | b |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[3:11] == ["5", "4", "", "", "", "2", "", ""]
    assert "None" not in text
    totals = next(line for line in text.splitlines() if line.startswith("Totals:"))
    assert "lost 0 (measured in 1 of 2 records)" in totals and "reordered 2," in totals
    assert "- lost: not measured" in text
