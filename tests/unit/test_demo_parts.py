"""The demo's parts that need no Ray: its output kept apart from Ray's and Spark's
(`quiet_stderr`), its phases (where each side's time went) and the rates timeline and plot that
show them, and `--plot` without matplotlib."""

from __future__ import annotations

import re
import subprocess
import sys
from itertools import pairwise
from types import SimpleNamespace

import pytest

from raykafka.app.demo import Timeline, plot_rates
from raykafka.app.demo_phases import READ_STEPS, WRITE_STEPS, DemoPhases, Side, Step

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


def a_run() -> tuple[Timeline, DemoPhases]:
    """A run of 3,000 rows as the demo sees it: its progress points and its sides' boundaries."""
    timeline = Timeline()
    timeline.points = {"write": [(0.0, 0), (1.4, 1000), (2.1, 3000)], "read": [(2.2, 0), (3.0, 2500), (4.3, 3000)]}
    write = Side.of("write", 3000, 0.0, 2.13, WRITE_STEPS, [0.84, 1.14, 1.54, 1.84, 2.09])
    read = Side.of("read", 3000, 2.2, 4.4, READ_STEPS, [2.9, 4.2])
    return timeline, DemoPhases(write, read)


def test_plot_rates_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_rates(*a_run(), tmp_path / "rates.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sides_phases_tile_it_and_share_it():
    """Each phase ends where the next begins, the last at the side's end: they add up to the
    total, and their shares to 1."""
    _, phases = a_run()
    write = phases.write
    assert [p.name for p in write.phases] == ["Spark's job", "hand-over", "pipeline start", "first message",
                                              "Kafka write", "release"]
    assert [round(p.seconds, 2) for p in write.phases] == [0.84, 0.30, 0.40, 0.30, 0.25, 0.04]
    assert write.phases[0].start == write.start and write.phases[-1].end == write.end
    assert all(a.end == b.start for a, b in pairwise(write.phases))
    assert sum(p.seconds for p in write.phases) == pytest.approx(write.seconds) == pytest.approx(2.13)
    assert sum(write.share(p) for p in write.phases) == pytest.approx(1.0)
    assert write.rate == pytest.approx(3000 / 2.13) and write.rate_figure == "1,408 rows/s"
    read = phases.read
    assert [(p.name, round(p.seconds, 2)) for p in read.phases] == [("group forming", 0.7), ("reading", 1.3),
                                                                   ("group close", 0.2)]


def test_a_boundary_not_seen_joins_its_phase_to_the_next_and_says_so():
    steps = (Step("a", "Spark", "makes"), Step("b", "RayDP", "fetches"), Step("c", "raykafka and the broker", "writes"),
             Step("d", "the broker and raykafka", "acks"))
    side = Side.of("write", 10, 0.0, 4.0, steps, [None, 2.0, None])
    assert [(p.name, p.whose, p.what, p.start, p.end) for p in side.phases] == [
        ("a + b", "Spark and RayDP", "makes; then fetches", 0.0, 2.0),
        ("c + d", "raykafka and the broker", "writes; then acks", 2.0, 4.0)]
    with pytest.raises(ValueError, match="4 steps need 3 ends"):
        Side.of("write", 10, 0.0, 4.0, steps, [1.0])


def test_a_boundary_out_of_order_is_held_between_its_neighbours():
    """Marks come from other processes' clocks: one before the boundary ahead of it, or past the
    side's end, gives a phase of no length, never a negative one or a sum over the total."""
    side = Side.of("write", 10, 1.0, 5.0, WRITE_STEPS, [2.0, 1.5, 3.0, 6.0, None])
    assert [(p.start, p.end) for p in side.phases] == [(1.0, 2.0), (2.0, 2.0), (2.0, 3.0), (3.0, 5.0), (5.0, 5.0)]
    assert side.phases[-1].name == "Kafka write + release"
    assert sum(p.seconds for p in side.phases) == pytest.approx(side.seconds)


def test_the_text_and_the_plot_show_the_same_figures():
    """The lines, the write and read lines, and the plot's legends all read one `DemoPhases`:
    each phase's seconds and share, and each side's rate, are the same strings in both."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from raykafka.app.demo import draw_rates, read_line, write_line

    timeline, phases = a_run()
    text = "\n".join([write_line(phases.write, 0), read_line(phases.read, 2, 0), *phases.lines()])
    fig = draw_rates(timeline, phases)
    try:
        legends = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
    for side in phases.sides:
        assert side.legend() in legends and f"({side.rate_figure}" in text
        for phase in side.phases:
            assert side.label(phase) in legends
            share = f"{side.share(phase):.0%}"
            assert re.search(rf"^ +{re.escape(phase.name)} +{phase.figure} +{share}  ", text, re.M), (phase, text)
    assert "write (1,408 rows/s overall)" in legends and "in 2.1s (1,408 rows/s)" in text
    assert "write: Spark's job 0.84s (39%)" in legends


def test_the_phase_lines_are_aligned_and_add_up():
    _, phases = a_run()
    lines = phases.lines()
    assert lines[0] == "time     the write's 2.13s, phase by phase"
    assert lines[7] == "time     the read's 2.20s, phase by phase"
    rows = [line for line in lines if line.startswith("           ")]
    assert len({re.search(r"\d+\.\d\ds", line).start() for line in rows}) == 1  # the seconds in one column
    write = [float(m) for m in re.findall(r"^ +.+? +(\d+\.\d\d)s ", "\n".join(lines[1:7]), re.M)]
    assert sum(write) == pytest.approx(2.13, abs=0.005 * len(write))


def test_a_producer_notes_the_first_delivery_after_each_watch_began():
    """A node writer's block learns when its producer next delivered (the write's first
    acknowledgement); failures and empty reports are no delivery, and a watch stopped is forgotten."""
    from raykafka.actors.metrics import ProducerMetrics
    from raykafka.wire.config import parse_config

    producer = SimpleNamespace(name="p", config=parse_config({"bootstrap.servers": "127.0.0.1:9092"}), buffer_in_use=0)
    metrics = ProducerMetrics(producer, None)
    before = metrics.watch_deliveries()
    metrics.resolved("t", 0, None)
    metrics.resolved("t", 3, ValueError("failed"))
    assert metrics.first_delivery(before) is None
    first = metrics.watch_deliveries()
    metrics.resolved("t", 5, None)
    second = metrics.watch_deliveries()
    metrics.resolved("t", 5, None)
    at_first, at_second = metrics.first_delivery(first), metrics.first_delivery(second)
    assert at_first is not None and at_second is not None and at_first <= at_second
    assert metrics.first_delivery(first) is None and not metrics._awaiting and not metrics._first_delivery


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from raykafka.app.cli import main\n"
            "sys.exit(main(['demo', '--plot']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 2
    assert "--plot needs matplotlib" in result.stderr and "raykafka[bench]" in result.stderr


def test_the_read_line_says_what_became_of_redelivered_rows():
    from raykafka.app.demo import read_line

    read = Side.of("read", 1000, 1.0, 3.0, READ_STEPS, [1.5, 2.9])
    assert read_line(read, 2, 0) == ("read     1,000 rows through a consumer group of 2 Ray actors in 2.0s "
                                     "(500 rows/s; no row redelivered)")
    assert read_line(read, 2, 1).endswith("(500 rows/s; 1 row redelivered after a rebalance, dropped as duplicates)")
    assert read_line(read, 2, 30).endswith("; 30 rows redelivered after a rebalance, dropped as duplicates)")


def test_a_writes_first_acknowledgement_is_the_earliest_of_its_blocks():
    """Blocks' outcomes (and a datasink's partial results) carry when their writer first heard
    an acknowledgement; the write's is the earliest, a block that heard none leaving it be."""
    from raykafka.spark_bridge.node_writers import BlockOutcome
    from raykafka.spark_bridge.sink import WriteResult

    part = WriteResult()
    for acked in (None, 5.0, 3.0, None):
        part.add_outcome(BlockOutcome(10, 0, {}, "n1", acked))
    assert part.first_acked == 3.0 and part.delivered == 40
    whole = WriteResult()
    whole.add_outcome(BlockOutcome(1, 0, {}, "n2"))  # an outcome as the writers made it before
    whole.add_outcome(part)
    assert whole.first_acked == 3.0 and whole.nodes == {"n2": 1, "n1": 40}
