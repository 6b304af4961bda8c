"""Waiting for metadata: what a producer stage uses while batches wait for a reachable broker.

Used by the TopicDispatcher (a topic whose partition count cannot be looked up) and the
LeaderDispatcher (a partition whose leader cannot be found). Each holds the batches itself, in
the order they came, and:

- `HoldBackoff` says how long to wait before the next look-up;
- `SelfTimer` calls a method of the actor itself after that wait (a synchronous actor cannot
  sleep without stopping its other callers), and `Wake` any callable (the in-process pipeline's);
- `split_expired` picks the held batches whose delivery.timeout.ms has run out, and
  `timed_out_groups` gives each its error, naming the look-up's last error (`batch.timed_out`:
  whether the broker may have written it); `closed_groups` does the same at close.

Plain Python but for `SelfTimer`, which asks Ray for the current actor's handle as it arms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from ..wire.errors import DeliveryTimeoutError, OutcomeUnknownError, ProducerClosedError
from .batch import MAY_BE_WRITTEN, MessageBatch, timed_out


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


class Wake:
    """One pending call, after a delay, in a thread of its own. `target()` gives the callable, and
    is asked when the wait is armed (in the caller's thread). The call made calls `fired()`
    first, so that the next `arm` starts a new wait. Plain Python: `SelfTimer` gives it an
    actor's method, the in-process pipeline its own."""

    def __init__(self, target: Callable[[], Callable[[], Any]]):
        self.target = target
        self._timer: threading.Timer | None = None
        self._due = 0.0  # time.monotonic() when the armed wait ends

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, delay_s: float) -> None:
        """Wait `delay_s`, unless a wait is armed already."""
        if self._timer is None:
            self._start(delay_s)

    def arm_by(self, delay_s: float) -> None:
        """Fire within `delay_s`: an armed wait that ends sooner stays, a later one is moved up."""
        if self._timer is not None and self._due <= time.monotonic() + delay_s:
            return
        self.cancel()
        self._start(delay_s)

    def _start(self, delay_s: float) -> None:
        self._due = time.monotonic() + delay_s
        self._timer = threading.Timer(delay_s, self.target())
        self._timer.daemon = True
        self._timer.start()

    def fired(self) -> None:
        self._timer = None

    def cancel(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


class SelfTimer(Wake):
    """One pending call of `method` on the current actor, after a delay (a synchronous actor
    cannot sleep without stopping its other callers)."""

    def __init__(self, method: str):
        super().__init__(lambda: getattr(ray.get_runtime_context().current_actor, method).remote)


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


def split_written(batches: list[MessageBatch]) -> list[tuple[bool, list[MessageBatch]]]:
    """The batches the broker has not written apart from those it may have
    (`MessageBatch.possibly_written`, per batch: one holding both kinds counts as the second),
    as (possibly_written, batches) for each kind there is, each in the order it came."""
    groups: dict[bool, list[MessageBatch]] = {False: [], True: []}
    for batch in batches:
        groups[bool(batch.possibly_written)].append(batch)
    return [(possibly, group) for possibly, group in groups.items() if group]


def timed_out_groups(expired: list[MessageBatch], delivery_timeout_ms: int | None,
                     why: str) -> list[tuple[list[MessageBatch], DeliveryTimeoutError]]:
    """The expired batches with the error each ends with (`batch.timed_out`), by `split_written`."""
    return [(group, timed_out(possibly, delivery_timeout_ms, why)) for possibly, group in split_written(expired)]


def closed_groups(waiting: list[MessageBatch], what: str) -> list[tuple[list[MessageBatch], Exception]]:
    """At close: the batches still waiting for `what`, with the error each ends with, by
    `split_written`: `ProducerClosedError`, or `OutcomeUnknownError` where the broker may have
    written it."""
    why = f"producer closed while the message waited for {what}"
    return [(group, OutcomeUnknownError(f"{why}; {MAY_BE_WRITTEN}") if possibly
             else ProducerClosedError(why)) for possibly, group in split_written(waiting)]
