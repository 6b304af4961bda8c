"""The demo's parts that need no Ray: its output kept apart from Ray's and Spark's
(`quiet_stderr`), its rates timeline and plot, and `--plot` without matplotlib."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raykafka.app.demo import Timeline, plot_rates

QUIET = """
import subprocess, sys
from raykafka.app.demo import quiet_stderr
with quiet_stderr(verbose=False) as (real, log):
    print("a python note", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('a child process note')"], check=True)
    real.write("the bar")
print("after", file=sys.stderr, flush=True)
print(log)
"""


def test_quiet_stderr_sends_fd_2_of_the_process_and_its_children_to_the_log():
    result = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True, timeout=120, check=True)
    assert result.stderr == "the barafter\n"
    with open(result.stdout.strip()) as log:
        assert log.read() == "a python note\na child process note"


def test_quiet_stderr_is_a_no_op_when_verbose():
    from raykafka.app.demo import quiet_stderr

    with quiet_stderr(verbose=True) as (real, log):
        assert real is sys.stderr and log is None


def test_plot_rates_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    timeline = Timeline()
    timeline.points = {"write": [(0.0, 0), (1.0, 1000), (2.0, 3000)], "read": [(2.5, 0), (3.0, 2500), (4.0, 3000)]}
    path = plot_rates(timeline, tmp_path / "rates.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from raykafka.app.cli import main\n"
            "sys.exit(main(['demo', '--plot']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 2
    assert "--plot needs matplotlib" in result.stderr and "raykafka[bench]" in result.stderr


def test_the_read_line_says_what_became_of_redelivered_rows():
    from raykafka.app.demo import read_line

    assert read_line(1000, 2, 2.0, 0) == ("read     1,000 rows through a consumer group of 2 Ray actors in 2.0s "
                                          "(500 rows/s; no row redelivered)")
    assert read_line(1000, 2, 2.0, 1).endswith("(500 rows/s; 1 row redelivered after a rebalance, dropped as duplicates)")
    assert read_line(1000, 2, 2.0, 30).endswith("; 30 rows redelivered after a rebalance, dropped as duplicates)")
