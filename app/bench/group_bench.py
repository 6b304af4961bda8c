"""What the group benches (`rebalance`, `lag_curve`) share: a `Feed`, a topic fed from a thread of
the driver, and `measure`, their runs on an embedded tansu and a Ray of their own."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

TICK_S = 0.01  # the feed sends what it owes every this often


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
