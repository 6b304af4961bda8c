"""`raykafka bench` draws a tqdm bar of the rows it has measured (app/progress.py: only on a
terminal); its log lines are written above the bar, not through it."""

from __future__ import annotations

import sys

from raykafka.app.bench import rows, run_log, suite


class _Bar:
    disable = False

    def __init__(self) -> None:
        self.n, self.lines = 0, []

    def update(self, k: int) -> None:
        self.n += k

    def write(self, line: str, file=None) -> None:
        assert file is sys.stderr
        self.lines.append(line)


def test_each_measured_row_advances_the_bar_and_its_line_is_written_above_it(capsys):
    progress = _Bar()
    run_log.PROGRESS.append(progress)
    try:
        settings = rows.Settings(messages=1000)
        ok = suite._measure("produce", "peer", 100, "none", settings, lambda: [0.5, 0.25, 1.0])
        failed = suite._measure("consume", "peer", 100, "none", settings, lambda: 1 / 0)
    finally:
        run_log.PROGRESS.remove(progress)
    assert ok.rate == 2000 and "ZeroDivisionError" in failed.note
    assert progress.n == 2
    assert [line.split("] ", 1)[1] for line in progress.lines] == [
        "produce peer 100B none: 2,000 msg/s ", f"consume peer 100B none: nan msg/s {failed.note}"]
    assert capsys.readouterr().err == ""  # nothing drawn through the bar
