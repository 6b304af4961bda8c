"""report.py's rendering of chaos records into RELIABILITY.md, without Ray or a broker: a figure
in the output is the figure in the record, a figure not measured says so, and records of another
form or tests with no record are named."""

from __future__ import annotations

import json
import re

import report  # beside this file (tests/chaos/conftest.py puts it on the path)

MEASURED = {"test": "test_a", "function": "test_a", "module": "test_producer_mock_chaos", "form": "full",
            "written_at": "2026-01-02T03:04:05Z", "commit": "abc123", "sent": 12345, "delivered": 12340,
            "failed": 5, "unresolved": 0, "lost": 0, "reordered": 0, "duplicated": 7, "failed_but_written": 0,
            "without_offset": 0, "heals": [{"seconds": 1.26, "found_in_log": 4952, "sent_again": 300},
                                           {"seconds": 1.84, "found_in_log": 0, "sent_again": 10}],
            "actors_killed": ["x/flusher", "x/retry_handler"], "seconds_to_settle_after_kill": 6.2}
PARTIAL = {"test": "test_b[p]", "function": "test_b", "module": "test_corrupt_batch", "form": "short",
           "sent": 5, "delivered": 4, "failed": None}  # the rest of MAIN is missing: not measured


def _row(text: str, start: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(start))
    return [c.strip() for c in row.split("|")[1:-1]]


def test_a_figure_in_the_output_is_the_figure_in_the_record():
    text = report.render([MEASURED])
    cells = _row(text, "| producer_mock_chaos | a |")
    assert cells[3:12] == ["12,345", "12,340", "5", "0", "0", "0", "7", "0", "0"]
    assert "- sent: 12,345" in text and "- duplicated: 7" in text
    assert "Totals: sent 12,345, delivered 12,340, failed 5, lost 0, reordered 0, duplicated 7, unresolved 0." in text
    # the heals' spans are computed from the record, not written anywhere by hand
    assert "rebuild 1.26–1.84 s, found in log 0–4,952, every message ended 6.2 s after the kill" in text
    assert _row(text, "| test_a | 2 |")[2:6] == ["x/retry_handler", "1.84", "0", "10"]
    assert "commit abc123" in text


def test_a_missing_or_null_figure_renders_as_not_measured_and_stays_out_of_the_totals():
    text = report.render([MEASURED, PARTIAL], form="short")
    cells = _row(text, "| corrupt_batch | b[p] |")
    assert cells[3:12] == ["5", "4"] + ["not measured"] * 7
    assert "None" not in text
    assert "- lost: not measured" in text and "- failed: not measured" in text
    totals = next(line for line in text.splitlines() if line.startswith("Totals:"))
    assert "sent 12,350," in totals and "lost 0 (measured in 1 of 2 records)" in totals


def test_records_of_another_form_and_tests_without_a_record_are_named():
    expected = [("test_producer_mock_chaos", "test_a"), ("test_corrupt_batch", "test_b"),
                ("test_broker_restart", "test_broker_restart_mid_stream")]
    text = report.render([MEASURED, PARTIAL], form="full", expected=expected)
    assert "Records not of the full form (1): `test_b[p]` (short)." in text
    assert "Tests with no record (failed, skipped or not run; 1): `test_broker_restart.test_broker_restart_mid_stream`." in text
    assert "Records: 2, full form" in text
    clean = report.render([MEASURED], form="full", expected=expected[:1])
    assert "Records not of" not in clean and "Tests with no record" not in clean


def test_the_file_says_how_to_regenerate_it():
    text = report.render([])
    top = text.split("What the chaos suite", 1)[0]
    assert f"\n    {report.COMMAND}\n" in top and top.startswith("# Reliability\n\nRegenerate this whole file")
    assert "Records: 0, full form, last written never" in text


def test_the_tests_that_write_records_are_read_from_the_test_files(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_writes(record, kit):\n    pass\n\n"
                                        "def test_silent(kit):\n    pass\n\ndef helper(record):\n    pass\n")
    assert report.expected_tests(tmp_path) == [("test_x", "test_writes")]
    assert ("test_corrupt_batch", "test_corrupt_batch_fails_its_partition_only") in report.expected_tests()


def test_records_are_loaded_in_the_scenarios_order(tmp_path):
    for name, r in [("b", {**PARTIAL, "module": "test_unlisted"}), ("a", PARTIAL), ("c", MEASURED)]:
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    assert [r["module"] for r in report.load(tmp_path)] == ["test_producer_mock_chaos", "test_corrupt_batch",
                                                             "test_unlisted"]


def test_the_notes_appended_quote_no_measured_figure():
    """A figure the notes need is rendered from the records (the tables above them); the notes
    keep prose: no count of messages, runs or records, no seconds, no thousands."""
    notes = (report.HERE / "NOTES.md").read_text()
    figure = re.compile(r"\d[\d,]*(\.\d+)?\s*(–|-\d|s\b|ms\b|%|messages|records|runs?\b|times|of \d)|\d{1,3}(,\d{3})+")
    assert [m.group(0) for m in figure.finditer(notes)] == []
