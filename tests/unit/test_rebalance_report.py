"""The rebalance bench's arithmetic and report (app/bench/rebalance.py), from records."""

from __future__ import annotations

from raykafka.app.bench.rebalance import _longest_gap, report


def test_the_longest_gap_counts_the_edges_of_the_window():
    assert _longest_gap([2.0, 3.0, 9.0], 1.0, 10.0) == 6.0
    assert _longest_gap([], 1.0, 4.0) == 3.0, "nothing handled: the whole window"
    assert _longest_gap([0.5, 12.0], 1.0, 4.0) == 3.0, "what falls outside does not count"


def test_the_report_gives_medians_with_their_spread_and_the_records_handled_twice():
    def run(mode, pause, handled):
        return {"mode": mode, "group_pause_s": pause, "stayed_pause_max_s": 1.0, "moved_pause_median_s": 2.0,
                "settled_s": 3.0, "moved": 8, "messages": 1000, "handled": handled}

    text = report([run("eager", 3.0, 1000), run("eager", 2.0, 1000), run("eager", 4.0, 1000),
                   run("cooperative", 0.2, 1005), run("cooperative", 0.1, 1000), run("cooperative", 0.3, 1000)],
                  "python -m raykafka.app.bench.rebalance --runs 3")
    eager, cooperative = (line for line in text.splitlines() if line.startswith(("| eager", "| cooperative")))
    assert "| 3.00 s (2.00–4.00) |" in eager and eager.endswith("| 0 of 3,000 |")
    assert "| 0.20 s (0.10–0.30) |" in cooperative and cooperative.endswith("| 5 of 3,000 |")
    assert "Median of 3 runs each" in text
