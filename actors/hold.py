"""Waiting for metadata: what a producer stage uses while batches wait for a reachable broker.

Used by the TopicDispatcher (a topic whose partition count cannot be looked up) and the
LeaderDispatcher (a partition whose leader cannot be found). Each holds the batches itself, in
the order they came, and:

- `HoldBackoff` says how long to wait before the next look-up;
- `SelfTimer` calls a method of the actor itself after that wait (a synchronous actor cannot
  sleep without stopping its other callers);
- `split_expired` picks the held batches whose delivery.timeout.ms has run out, to fail them
  with the look-up's last error.

Plain Python but for `SelfTimer.arm`, which asks Ray for the current actor's handle.
"""

from __future__ import annotations

import threading

import ray

from .batch import MessageBatch


class HoldBackoff:
    """The wait between metadata refreshes while batches are held: `retry.backoff.ms`, doubling
    up to `CAP_MS` (or `retry.backoff.ms` if larger); back to the start once nothing is held."""

    CAP_MS = 1000

    def __init__(self, base_ms: int):
        self.base_ms = base_ms
        self.attempts = 0

    def next(self) -> float:
        """Seconds to wait before the next refresh."""
        wait = min(self.base_ms * 2 ** min(self.attempts, 16), max(self.CAP_MS, self.base_ms))
        self.attempts += 1
        return wait / 1000

    def reset(self) -> None:
        self.attempts = 0


class SelfTimer:
    """One pending call of `method` on the current actor, after a delay. The method calls
    `fired()` first, so that the next `arm` starts a new wait."""

    def __init__(self, method: str):
        self.method = method
        self._timer: threading.Timer | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, delay_s: float) -> None:
        if self._timer is not None:
            return
        me = ray.get_runtime_context().current_actor
        self._timer = threading.Timer(delay_s, lambda: getattr(me, self.method).remote())
        self._timer.daemon = True
        self._timer.start()

    def fired(self) -> None:
        self._timer = None

    def cancel(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


def split_expired(held: list[MessageBatch], now_ms: float,
                  delivery_timeout_ms: int | None) -> tuple[list[MessageBatch], list[MessageBatch]]:
    """(kept, expired): the held message batches older than `delivery_timeout_ms` at `now_ms`
    are expired (control batches and batches without a creation time never are); order kept."""
    if delivery_timeout_ms is None:
        return held, []
    kept: list[MessageBatch] = []
    expired: list[MessageBatch] = []
    for batch in held:
        old = not batch.is_control and batch.created_ms and now_ms - batch.created_ms > delivery_timeout_ms
        (expired if old else kept).append(batch)
    return kept, expired
