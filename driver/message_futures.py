"""Message futures: the one place that relies on `concurrent.futures`' private fields.

A `Producer` makes one future per `send`; building a Condition (and its RLock) per message costs
more than the rest of `send`. So message futures share one Condition (`MessageFuture`) and are
set many at a time under one hold of it (`settle_futures`), which means setting Future's private
fields. That is done only where they are exactly the fields this module knows
(`SHARED_CONDITION`, checked at import against a fresh Future); elsewhere a message future is a
plain Future, set the ordinary way (`set_future`).

Used by driver/producer.py and driver/producer_settlement.py only.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Any

log = logging.getLogger("raykafka.producer")

# Python's private module, used here and nowhere else: `concurrent.futures` exports no names for a
# Future's states, which `MessageFuture` and `settle_futures` set themselves (checked below against
# the Future's fields, and not used when they differ).
try:
    from concurrent.futures._base import FINISHED as _FINISHED
    from concurrent.futures._base import PENDING as _PENDING
    from concurrent.futures._base import RUNNING as _RUNNING

    _FIELDS = {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}
    SHARED_CONDITION = set(vars(Future())) == _FIELDS
except ImportError:  # pragma: no cover - another Python's concurrent.futures
    SHARED_CONDITION = False


class MessageFuture(Future):
    """A `concurrent.futures.Future` sharing one Condition with the producer's other futures.

    Building a Condition (and its RLock) per message costs more than the rest of `send`; shared,
    a `set_result` wakes every waiting thread, each of which checks its own future again. This
    sets Future's private fields, so it is used only where they are the ones it knows
    (`SHARED_CONDITION`, checked at import); elsewhere it is a plain Future.

    Cancelling one (as `asyncio.wait_for` does when it times out) does not recall the message:
    it still goes, and its outcome still reaches `on_delivery`, `successes()` and `errors()`."""

    def __init__(self, condition: threading.Condition):  # what Future.__init__ sets, minus the Condition
        if not SHARED_CONDITION:
            super().__init__()
            return
        self._condition = condition
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []

    def _wait(self, timeout: float | None) -> None:
        """Wait until done: a wake-up may be for another future, so check again until the deadline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._state == _PENDING or self._state == _RUNNING:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._condition.wait(left)

    def result(self, timeout: float | None = None) -> Any:
        if not SHARED_CONDITION:
            return super().result(timeout)
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not SHARED_CONDITION:
            return super().exception(timeout)
        self._wait(timeout)
        return super().exception(0)


def settle_futures(condition: threading.Condition, settled: list) -> list:
    """Set many message futures (sharing `condition`) under one hold of it and wake waiters once.

    A future someone waits on through `concurrent.futures.wait`, has callbacks on, or has
    cancelled is returned, to be set the ordinary way (`set_future`)."""
    if not SHARED_CONDITION:
        return settled
    slow = []
    with condition:
        for item in settled:
            future, meta, error = item
            if future._waiters or future._done_callbacks or future._state != _PENDING:
                slow.append(item)
            elif error is None:
                future._result = meta
                future._state = _FINISHED
            else:
                future._exception = error
                future._state = _FINISHED
        condition.notify_all()
    return slow


def set_future(future: Future, outcome: Any, error: Exception | None) -> None:
    """Set a future the ordinary way. One its caller cancelled stays cancelled: the message went
    (or not) all the same, and its outcome is reported to `on_delivery` and the queues."""
    try:
        if error is None:
            future.set_result(outcome)
        else:
            future.set_exception(error)
    except InvalidStateError:  # cancelled (or set) by someone else: nothing to tell it
        return
    except BaseException:  # noqa: B036 - a done-callback raising past concurrent.futures' own guard
        log.exception("a callback on a producer future raised")
