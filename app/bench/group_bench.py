"""What the group benches (`rebalance`, `lag_curve`) share: a `Feed`, a topic fed from a thread of
the driver; the members' handlers, which note what they handled (`note`, read back by
`read_notes`); and `measure`, their runs on an embedded tansu and a Ray of their own.

The handlers are functions of this module (never run as `__main__`), so Ray sends them to the
member actors by reference: each member's process has its own `MEMBER_LOCK`."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

TICK_S = 0.01  # the feed sends what it owes every this often


def note(notes: str, batch: Any) -> None:
    """In a member actor: a line in `notes` (a folder) saying when it handled `batch`, of which
    partition, from which offset, and how many records."""
    line = b"%.4f %d %d %d\n" % (time.time(), batch.column("partition")[0].as_py(), batch.column("offset")[0].as_py(),
                                 batch.num_rows)
    with open(os.path.join(notes, f"{os.getpid()}.txt"), "ab") as fh:
        fh.write(line)


class Noted(NamedTuple):
    """A batch a member handled (`note`)."""

    at: float  # time.time()
    partition: int
    first: int  # its first record's offset
    records: int


def read_notes(notes: Path) -> list[Noted]:
    """Every member's notes (`note`), in time order."""
    out = []
    for f in notes.iterdir():
        for line in f.read_bytes().split(b"\n"):
            parts = line.split()
            if len(parts) == 4:
                out.append(Noted(float(parts[0]), *(int(x) for x in parts[1:])))
    return sorted(out)


def handled(notes: Path) -> tuple[int, int]:
    """Records handled, by the notes: how many handlings, and how many records (each once)."""
    noted = read_notes(notes)
    offsets: dict[int, set[int]] = {}
    for n in noted:
        offsets.setdefault(n.partition, set()).update(range(n.first, n.first + n.records))
    return sum(n.records for n in noted), sum(len(o) for o in offsets.values())


MEMBER_LOCK = threading.Lock()  # in a member's process: one batch handled at a time


def handle_slowly(notes: str, handle_s: float, batch: Any) -> None:
    """The groups' handler, in the member actors: `handle_s` a record, one batch at a time in a
    member (so a member handles 1 / `handle_s` records a second), then a note of it (`note`)."""
    with MEMBER_LOCK:
        time.sleep(handle_s * batch.num_rows)
    note(notes, batch)


class Feed:
    """Messages `m0`, `m1`, ... into `topic`, round robin over its `partitions`, at `rate(t)` a
    second (`t`: seconds since the feed started), until `stop()` or, given, `length_s`."""

    def __init__(self, producer: Any, topic: str, partitions: int, rate: Callable[[float], float],
                 length_s: float | None = None):
        self.producer, self.topic, self.partitions = producer, topic, partitions
        self.rate, self.length_s = rate, length_s
        self.sent = 0
        self.started = self.started_wall = 0.0  # time.monotonic() and time.time() at its start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.started, self.started_wall = time.monotonic(), time.time()
        next_at, owed = self.started, 0.0
        while not self._stop.is_set():
            at = time.monotonic() - self.started
            if self.length_s is not None and at >= self.length_s:
                return
            owed += self.rate(at) * TICK_S
            while owed >= 1:
                self.producer.send(self.topic, b"m%d" % self.sent, partition=self.sent % self.partitions)
                self.sent += 1
                owed -= 1
            next_at += TICK_S
            time.sleep(max(0.0, next_at - time.monotonic()))

    def start(self) -> Feed:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop now (or, once it has run its length, wait for its thread)."""
        self._stop.set()
        self._thread.join()


def arguments(doc: str, runs: int, out: str, beside: str) -> argparse.Namespace:
    """A group bench's command line: `--runs`, `--out` (the report; `beside` says what goes beside
    it) and `--from-records` (the report again from the records beside it, measuring nothing)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--out", default=out, help=f"the report; {beside} beside it")
    parser.add_argument("--from-records", action="store_true",
                        help="write the report again from the records beside it, measuring nothing")
    return parser.parse_args()


def measure(runs: int, kinds: tuple[str, ...], one_run: Callable[[str, str, int], dict[str, Any]],
            shown: Callable[[dict[str, Any]], dict[str, Any]] = lambda record: record) -> list[dict[str, Any]]:
    """`one_run(bootstrap, kind, run)` for each run and each kind in turn, on one embedded tansu and
    a local Ray of 2 CPUs; each record printed (as `shown` gives it) as it comes."""
    import ray

    from raykafka.driver.embedded_broker import EmbeddedBroker

    records = []
    with EmbeddedBroker() as broker:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            for run in range(runs):
                for kind in kinds:
                    records.append(one_run(broker.bootstrap, kind, run))
                    print(json.dumps(shown(records[-1])), flush=True)
        finally:
            ray.shutdown()
    return records
