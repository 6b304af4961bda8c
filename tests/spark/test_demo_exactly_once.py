"""`raykafka demo --exactly-once` end to end: its own broker, Ray and Spark; Kafka → Spark →
Kafka with the writer killed mid-run; exit 0 only with every input in the output exactly once
(read_committed), and the counts printed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.spark, pytest.mark.slow]


def test_demo_exactly_once_kills_its_writer_and_reads_every_input_once(tmp_path):
    result = subprocess.run([sys.executable, "-m", "raykafka.app.cli", "demo", "--exactly-once"],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "input    200,000 events in eos-in" in result.stdout
    assert "writer killed mid-block: yes" in result.stdout
    check = re.search(r"read_committed: ([\d,]+) rows, (\d+) duplicates, (\d+) missing, (\d+) unknown; "
                      r"read_uncommitted: ([\d,]+) rows \(([\d,]+) aborted\)", result.stdout)
    assert check, result.stdout
    committed, duplicates, missing, unknown, in_log, aborted = (int(g.replace(",", "")) for g in check.groups())
    assert (committed, duplicates, missing, unknown) == (200_000, 0, 0, 0)
    # the killed attempt's rows are in the log, aborted; none when the kill landed as its commit went
    # through (the restarted writer then finds the block's marker and writes nothing again)
    assert in_log == committed + aborted
    assert "every input is in the output exactly once" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("summary  200,000 events through Kafka")
