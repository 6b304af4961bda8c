"""`LocalProducer`: the part of `Producer`'s surface the mock-cluster scenarios use, over a
`LocalPipeline` (driver/local_pipeline.py), so that a scenario about the pipeline's logic runs
in this process without Ray.

It decides nothing: each `send` and `send_batch` is one `LocalPipeline.send_batch` call, and the
outcomes the pipeline reports are settled by the `Producer`'s own `Ledger`
(driver/producer_ledger.py), which gives the same `RecordMetadata`, `BatchResult` and errors a
`Producer` gives. The pipeline is called from one thread: a future's `result` takes the
outcomes itself while it waits. Both number the messages from 0 in the order they are taken,
one number a message, so the pipeline's ids are the ledger's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from raykafka.actors.producer_results import Outcome
from raykafka.driver.local_pipeline import LocalPipeline
from raykafka.driver.producer_ledger import BatchResult, Ledger, RecordMetadata

POLL = 0.5  # s, the longest one wait for the pipeline's outcomes, so a waiter sees its deadline
# the bytes a message holds in the ledger: none, as buffer.memory is the pipeline's to bound
NO_BYTES = 0


class LocalFuture(Future):
    """A `send`'s or `send_batch`'s future, whose `result` takes the pipeline's outcomes while it waits."""

    def __init__(self, producer: LocalProducer):
        super().__init__()
        self.producer = producer

    def result(self, timeout: float | None = None) -> RecordMetadata | BatchResult:
        self.producer.wait_until(self.done, timeout)
        return super().result(0)


class LocalProducer:
    """`send`, `send_batch`, `flush`, `close` and `producer_id` of a `Producer`, in this process."""

    def __init__(self, config: Mapping[str, Any]):
        self.pipeline = LocalPipeline(config)
        self.producer_id = self.pipeline.producer_id
        self.ledger = Ledger()

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None) -> LocalFuture:
        future = LocalFuture(self)
        self.ledger.add(future, topic, int(time.time() * 1000), NO_BYTES)
        self._hand_on(topic, [value], None if key is None else [key], None if partition is None else [partition])
        return future

    def send_batch(self, topic: str, values: list, partitions: list[int] | None = None) -> LocalFuture:
        future = LocalFuture(self)
        self.ledger.add_batch(len(values), future, NO_BYTES)
        self._hand_on(topic, values, None, partitions)
        return future

    def _hand_on(self, topic: str, values: list, keys: list | None, partitions: list[int] | None) -> None:
        self._settle(self.pipeline.send_batch(topic, values, keys=keys, partitions=partitions))
        assert self.pipeline.next_id == self.ledger.next_id, "the pipeline numbers messages as the ledger does"

    def _settle(self, outcomes: list[Outcome]) -> None:
        for future, metadata, error in self.ledger.settle(outcomes):
            if error is None:
                future.set_result(metadata)
            else:
                future.set_exception(error)
        for batch in self.ledger.take_finished():
            batch.future.set_result(batch.result())

    def wait_until(self, condition: Callable[[], bool], timeout: float | None) -> None:
        """Take the pipeline's outcomes until `condition()` holds or `timeout` s have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            left = POLL if deadline is None else min(POLL, deadline - time.monotonic())
            if left <= 0:
                return
            self._settle(self.pipeline.wait_outcomes(left))

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every message sent so far has ended; how many have not (0 unless `timeout` ran out)."""
        self.wait_until(lambda: not self.ledger, timeout)
        return len(self.ledger)

    def close(self, timeout: float | None = None) -> None:
        """Wait up to `timeout` s for what was sent, then close the pipeline (which fails what is
        left) and settle the last outcomes."""
        self.flush(timeout)
        self.pipeline.close()
        self._settle(self.pipeline.take_outcomes())

    def __enter__(self) -> LocalProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
