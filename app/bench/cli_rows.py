"""The command line's start-up, measured by `raykafka bench` before it starts Ray: `raykafka
produce` of 1,000 lines and `raykafka consume -e` of them, beside the same done by a script of
confluent-kafka's (Debian's kcat is built on a librdkafka whose ApiVersions request tansu cannot
answer: ENVIRONMENT.md), and how long `raykafka consume -e` takes to name a wrong broker address
and a topic that does not exist. Each command runs as a user runs it, in a new process, on a
machine where no Ray runs (`RAY_ADDRESS` unset).

Called by: `suite.run_suite`. Calls: the `raykafka` executable and Python, as subprocesses.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

LINES = 1_000  # messages each produce and consume row moves
COMMAND_TIMEOUT = 120.0  # seconds one command may take before its row fails
PRODUCE_ROW = f"raykafka produce, {LINES:,} lines"
CONSUME_ROW = f"raykafka consume -e, {LINES:,} messages"
PEER_PRODUCE_ROW = f"confluent-kafka script, produce {LINES:,} lines"
PEER_CONSUME_ROW = f"confluent-kafka script, consume {LINES:,} messages to the end"
NO_BROKER_ROW = "raykafka consume -e, no broker at the address: the error"
NO_TOPIC_ROW = "raykafka consume -e, a topic that does not exist: the error"
CLI_BOUND_S = 2.0  # each raykafka row's target (issue: the newcomer's first hour)
RAYKAFKA_ROWS = (PRODUCE_ROW, CONSUME_ROW, NO_BROKER_ROW, NO_TOPIC_ROW)

# the peer: what a user of confluent-kafka writes for the same two commands (argv: bootstrap, topic)
PEER_PRODUCE = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1]})
for line in sys.stdin.buffer:
    p.produce(sys.argv[2], line.rstrip(b"\\n"))
    p.poll(0)
sys.exit(1 if p.flush(60) else 0)
"""
PEER_CONSUME = """
import sys
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "cli-bench", "enable.partition.eof": True,
              "enable.auto.commit": False})
parts = c.list_topics(sys.argv[2], timeout=10).topics[sys.argv[2]].partitions
c.assign([TopicPartition(sys.argv[2], p, OFFSET_BEGINNING) for p in parts])
ended = set()
while len(ended) < len(parts):
    for m in c.consume(500, timeout=1.0):
        if m.error() is not None:
            ended.add(m.partition())
        else:
            sys.stdout.buffer.write(m.value() + b"\\n")
c.close()
"""


def raykafka_command() -> list[str]:
    """The `raykafka` executable installed beside this Python, else the module."""
    beside = os.path.join(os.path.dirname(sys.executable), "raykafka")
    return [beside] if os.path.exists(beside) else [sys.executable, "-m", "raykafka.app.cli"]


def _without_ray() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def timed(argv: list[str], stdin: bytes = b"", expect_ok: bool = True) -> float:
    """Seconds `argv` took, as a new process; it must exit 0 (`expect_ok`) or not."""
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=COMMAND_TIMEOUT, env=_without_ray())
    seconds = time.perf_counter() - start
    if (done.returncode == 0) != expect_ok:
        raise RuntimeError(f"{' '.join(argv[:3])}… exited {done.returncode}: {done.stderr.decode()[-200:]}")
    return seconds


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(bootstrap: str, topic: Callable[[], str], runs: int) -> dict[str, list[float] | str]:
    """Each row's seconds per run, or why it could not run. Each produce run writes a new topic,
    which the consume runs then read to its end."""
    lines = b"".join(b"line-%04d\n" % i for i in range(LINES))
    rk = raykafka_command()
    rows: dict[str, list[float] | str] = {}

    def row(label: str, fn: Callable[[], float]) -> None:
        if isinstance(rows.get(label), str):
            return  # failed before: not again
        try:
            rows.setdefault(label, []).append(fn())  # type: ignore[union-attr]
        except Exception as exc:
            rows[label] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"

    for _ in range(runs):
        t = topic()
        row(PRODUCE_ROW, lambda t=t: timed([*rk, "produce", "-b", bootstrap, "-t", t], lines))
        row(CONSUME_ROW, lambda t=t: timed([*rk, "consume", "-b", bootstrap, "-t", t, "-e"]))
        k = topic()
        row(PEER_PRODUCE_ROW, lambda k=k: timed([sys.executable, "-c", PEER_PRODUCE, bootstrap, k], lines))
        row(PEER_CONSUME_ROW, lambda k=k: timed([sys.executable, "-c", PEER_CONSUME, bootstrap, k]))
        row(NO_BROKER_ROW, lambda: timed([*rk, "consume", "-b", f"127.0.0.1:{closed_port()}", "-t", "x", "-e"],
                                         expect_ok=False))
        row(NO_TOPIC_ROW, lambda: timed([*rk, "consume", "-b", bootstrap, "-t", "no-such-topic-here", "-e"],
                                        expect_ok=False))
    return rows


def rows_of(found: dict[str, Any]) -> list[tuple[str, list[float] | None, str]]:
    """(label, seconds per run or None, note) in the table's order."""
    order = (PRODUCE_ROW, PEER_PRODUCE_ROW, CONSUME_ROW, PEER_CONSUME_ROW, NO_BROKER_ROW, NO_TOPIC_ROW)
    return [(label, found[label] if isinstance(found.get(label), list) else None,
             found.get(label) if isinstance(found.get(label), str) else "") for label in order if label in found]
