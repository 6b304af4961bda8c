"""The lag bench's arithmetic (`app/bench/lag_curve.py`) and the group benches' notes
(`app/bench/group_bench.py`), on curves and notes made up here: no Ray, no broker."""

import json

import pytest

from raykafka.app.bench import lag_curve
from raykafka.app.bench.lag_curve import WORKLOAD, Workload, figures, report

BURST_END = WORKLOAD.burst_end
LAG_PER_MEMBER = WORKLOAD.lag_per_member


def run(group: str, samples: list[list[float]], messages: int = 1000, handled: int = 1000, scalings=()) -> dict:
    return {"group": group, "run": 0, "messages": messages, "handled": handled, "distinct": messages, "samples": samples,
            "scalings": list(scalings)}


def test_the_feed_bursts_only_within_its_window():
    w = WORKLOAD
    assert w.rate_at(0) == w.rate_at(w.burst_at_s - 0.01) == w.rate_at(BURST_END) == w.base_rate
    assert w.rate_at(w.burst_at_s) == w.rate_at(BURST_END - 0.01) == w.burst_rate


def test_a_curve_gives_its_peak_its_return_under_the_bound_and_its_end():
    samples = [[1.0, 0, 1], [BURST_END - 5, 3 * LAG_PER_MEMBER, 1], [BURST_END + 4, LAG_PER_MEMBER, 3],
               [BURST_END + 6, LAG_PER_MEMBER - 1, 3], [BURST_END + 8, LAG_PER_MEMBER + 1, 2], [BURST_END + 20, 0, 1]]
    got = figures(run("by-lag", samples, messages=1000, handled=1007))
    assert got["peak_lag"] == 3 * LAG_PER_MEMBER
    assert got["back_under_s"] == pytest.approx(8 + lag_curve.SAMPLE_S)  # the last time over it counts, not the first under
    assert got["all_handled_s"] == BURST_END + 20
    assert got["largest"] == 3
    assert got["handled_twice"] == 7


def test_a_curve_never_over_the_bound_is_back_at_once():
    assert figures(run("fixed", [[1.0, 10, 1], [2.0, 0, 1]]))["back_under_s"] == 0.0


def test_the_report_has_a_row_per_group_and_says_each_change_of_size(tmp_path):
    runs = [run("fixed", [[1.0, 2 * LAG_PER_MEMBER, 1], [90.0, 0, 1]]),
            run("by-lag", [[1.0, 2 * LAG_PER_MEMBER, 1], [50.0, 0, 3]], handled=1002,
                scalings=[[14.2, 1, 3], [61.0, 3, 2]])]
    json.dumps(runs)  # the records are what the report is written from
    text = report(runs, "python -m raykafka.app.bench.lag_curve --runs 1", "LAG.png")
    fixed = next(line for line in text.splitlines() if line.startswith("| fixed |"))
    by_lag = next(line for line in text.splitlines() if line.startswith("| by-lag |"))
    assert "90.0 s" in fixed and "| 1 |" in fixed and "0 of 1,000" in fixed
    assert "50.0 s" in by_lag and "| 3 |" in by_lag and "2 of 1,000" in by_lag
    assert "1→3 at 14 s, 3→2 at 61 s" in text


def test_the_figures_and_the_report_follow_the_workload_kept_in_the_records():
    """A run measured with other settings is judged by its own (the records keep them)."""
    w = Workload(burst_at_s=2.0, burst_s=3.0, lag_per_member=100)
    samples = [[1.0, 0, 1], [4.0, 150, 1], [7.0, 150, 2], [9.0, 50, 2], [12.0, 0, 1]]
    assert figures(run("by-lag", samples), w)["back_under_s"] == pytest.approx(7.0 + lag_curve.SAMPLE_S - 5.0)
    assert figures(run("by-lag", samples))["back_under_s"] == 0.0  # under the default bound throughout
    assert "`lag_per_member=100`" in report([run("fixed", samples), run("by-lag", samples)], "cmd", "LAG.png", w)


def test_the_notes_count_a_record_handled_twice_once_among_the_records(tmp_path):
    """Two members' notes: partition 0's offsets 10-14 handled by both (a move), partition 1's once.
    The records handled are counted once each; the handlings, twice where they were twice."""
    import pyarrow as pa

    from raykafka.app.bench.group_bench import handled, note, read_notes

    def batch(partition: int, first: int, n: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"partition": [partition] * n, "offset": list(range(first, first + n))})

    (tmp_path / "other.txt").write_bytes(b"1.0 0 10 5\n")  # another member's notes file
    note(str(tmp_path), batch(0, 10, 5))
    note(str(tmp_path), batch(1, 0, 3))
    assert handled(tmp_path) == (13, 8)
    assert [(n.partition, n.first, n.records) for n in read_notes(tmp_path)][0] == (0, 10, 5)  # in time order
