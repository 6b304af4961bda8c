"""RetryQueue: the batches waiting out `retry.backoff.ms` before they go back to the TopicDispatcher.

Ray-free; one per producer, inside the RetryHandler actor. `put` is called for every BrokerWorker's
retry and never blocks (the pipeline is a loop: a retry that waited on the TopicDispatcher could
deadlock it, so the queue is unbounded); `take` is called by the one forwarding thread and
blocks until the oldest batches are due. Order is kept: batches come out in the order they were
put, those due at the same time together in one list.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from .batch import MessageBatch


class RetryQueue:
    def __init__(self, backoff: float, clock: Callable[[], float] = time.monotonic):
        self.backoff = backoff
        self._clock = clock
        self._queue: deque[tuple[float, list[MessageBatch]]] = deque()  # (due, batches), due in order
        self._cond = threading.Condition()
        self._closing = False

    def put(self, batches: list[MessageBatch]) -> None:
        """Batches to forward once `backoff` s have passed."""
        with self._cond:
            self._queue.append((self._clock() + self.backoff, batches))
            self._cond.notify()

    def take(self) -> list[MessageBatch] | None:
        """Every batch now due, oldest first, once there is one; None once closed."""
        with self._cond:
            while True:
                if self._closing:
                    return None
                if not self._queue:
                    self._cond.wait(1.0)
                    continue
                now = self._clock()
                due = self._queue[0][0]
                if due > now:
                    self._cond.wait(due - now)
                    continue
                batches: list[MessageBatch] = []
                while self._queue and self._queue[0][0] <= now:
                    batches.extend(self._queue.popleft()[1])
                return batches

    def close(self) -> int:
        """Stop: `take` answers None from now on; how many retries were still waiting (dropped)."""
        with self._cond:
            self._closing = True
            left = len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        return left
