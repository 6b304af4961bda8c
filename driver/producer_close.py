"""`Closer`: how a `Producer` closes: what it accepted delivered, then every actor of it stopped.

One per Producer, made by it once its threads and its watchdog run; `Producer.close` is
`close` here. It stops new sends, waits (bounded by `timeout`, or without one by
`delivery.timeout.ms`) until what was sent has ended, then stops the threads and shuts the
pipeline down in Sarama's order (`ProducerPipeline.shut_down`), all of it bounded (`CLOSE_GRACE`
s, or what is left of `timeout`, but at least CLOSE_MIN); the results thread is stopped last and
the mailboxes' last reports taken, then what is left unresolved fails, and every actor of the
producer is killed: a message still gathered here with a `ProducerClosedError` (it was never
handed on), one handed to the pipeline with an `OutcomeUnknownError` saying why (nothing
answered for it, and a request may have carried it). From a delivery callback (`on_delivery`,
or a future's done-callback) it is Java's close(0) (`close_from_callback`); with Ray shut down
under the producer it only fails what is pending (`ray_gone`, the Producer's).

Reads and sets the `ProducerState`'s flags; calls the `Settlement` (the last reports, the
batches the sender could not hand on), the watchdog (who died), the pipeline in use (shut down,
killed) and the Producer's `pending`, `ray_gone`, `fail_unresolved` and `wait_resolved`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..actors.batch import MAY_BE_WRITTEN
from ..wire.errors import OutcomeUnknownError, ProducerClosedError
from .accumulator import Accumulator
from .producer_healer import Healer
from .producer_pipeline import CLOSE_MIN, left
from .producer_poller import LAST_POLL_WAIT
from .producer_settlement import Settlement
from .producer_state import ProducerState
from .producer_watchdog import ProducerWatchdog
from .ray_runtime import RaySession

# close's shutdown of the actors takes at most this long (s) after the messages had their time;
# with a timeout, what is left of it, but at least CLOSE_MIN (driver/producer_pipeline.py)
CLOSE_GRACE = 30.0


class Closer:
    def __init__(self, state: ProducerState, acc: Accumulator, settlement: Settlement, healer: Healer,
                 watchdog: ProducerWatchdog, sender: threading.Thread, poller: threading.Thread, metrics: Any,
                 ray_session: RaySession, heals_on_death: bool, pending: Callable[[], int],
                 ray_gone: Callable[[], None], fail_unresolved: Callable[[Exception], None],
                 wait_resolved: Callable[..., int]):
        """`sender`, `poller`: the Producer's threads; `pending`, `ray_gone`, `fail_unresolved`
        and `wait_resolved(deadline, give_up)`: its methods."""
        self.state = state
        self.acc = acc
        self.settlement = settlement
        self.healer = healer
        self.watchdog = watchdog
        self.sender = sender
        self.poller = poller
        self.metrics = metrics
        self.ray_session = ray_session
        self.heals_on_death = heals_on_death
        self.pending = pending
        self.ray_gone = ray_gone
        self.fail_unresolved = fail_unresolved
        self.wait_resolved = wait_resolved

    def close(self, timeout: float | None = None) -> None:
        """`Producer.close`: deliver everything already accepted, then stop every actor of the
        producer, all of it bounded; once an actor has died, what it held fails naming it."""
        state = self.state
        if state.closed:
            return
        dog = self.watchdog
        if self.ray_session.gone():  # shut down under us: its actors went with it
            self.ray_gone()
            dog.stop()
            self.metrics.close()
            return
        if self.settlement.in_callback():
            self.close_from_callback()
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with state.cond:
            state.closed = True  # no new sends; what is queued still goes
        try:
            if self.wait_resolved(deadline, give_up=lambda: bool(dog.dead) and not self.heals_on_death):
                dog.scan_now()  # before the shutdown kills actors on purpose: who died, if anyone
            self.metrics.close()  # the last report, while the BrokerWorkers can still be asked
            with state.cond:
                state.stopping = True  # the sender hands over what is left, then ends
                state.cond.notify_all()
                healer = self.healer.thread
            now = time.monotonic()
            stop_by = now + CLOSE_GRACE if deadline is None else max(deadline, now + CLOSE_MIN)
            if healer is not None:  # a heal under way ends first (or is given up at stop_by)
                healer.join(left(stop_by))
            self.sender.join(left(stop_by))
            if not self.sender.is_alive():  # else stuck handing over: what it holds fails below
                self.settlement.fail_handed_on(state.routes.drain(left(stop_by)))
            state.pipeline.shut_down(stop_by, self.pending, dog.dead_names("broker_worker"))
        finally:
            self.take_last_results()
            with state.cond:
                gathered = self.acc.drop()
            self.settlement.fail_gathered(gathered, ProducerClosedError("producer closed before the message was handed on"))
            self.fail_unresolved(self.close_error(timeout, deadline))
            dog.stop()
            state.pipeline.kill_all(CLOSE_MIN)

    def close_from_callback(self) -> None:
        """close() from a delivery callback (`on_delivery`, or a future's done-callback), whose
        thread delivers the reports that close would wait for: Java's close(0) from a callback.
        Nothing more is handed on or taken from the mailboxes (the results thread ends after
        this report), every unresolved message ends saying so (a `ProducerClosedError` if it was
        still gathered here, else an `OutcomeUnknownError`: the pipeline had it), and every
        actor of the pipeline is killed (Ray lists none within CLOSE_MIN s) before it returns."""
        state = self.state
        with state.cond:
            state.closed = state.stopping = state.results_stopped = True
            gathered = self.acc.drop()  # never handed on, nor will be: failed just below
            state.cond.notify_all()
        why = "producer closed by a delivery callback (close(0))"
        self.settlement.fail_gathered(gathered, ProducerClosedError(f"{why} before the message was handed on"))
        self.fail_unresolved(OutcomeUnknownError(f"{why} with the message in its pipeline; {MAY_BE_WRITTEN}"))
        self.watchdog.stop()
        self.metrics.close()
        state.pipeline.kill_all(CLOSE_MIN)

    def take_last_results(self) -> None:
        """Stop the results thread, then take what the pipeline reported last, so that a message
        delivered during the shutdown is not failed below."""
        with self.state.cond:
            self.state.results_stopped = True
        self.poller.join(5)
        if self.poller.is_alive() or self.ray_session.gone():
            return
        self.settlement.take_reports(self.state.pipeline.last_results(LAST_POLL_WAIT))

    def close_error(self, timeout: float | None, deadline: float | None) -> OutcomeUnknownError:
        """The error of the messages close could not see end: each was handed to the pipeline,
        whose stages answered for it neither before close's time ran out nor in their last
        reports, so a request may have carried it (`hold.closed_groups` says the same of what a
        living stage still held)."""
        dead = self.watchdog.dead_actors()
        if dead:
            return OutcomeUnknownError(f"producer closed with the message in its pipeline; {MAY_BE_WRITTEN}: {dead}")
        if deadline is not None and time.monotonic() >= deadline:
            return OutcomeUnknownError(f"producer closed after {timeout}s with the message still in its pipeline; "
                                       f"{MAY_BE_WRITTEN}")
        return OutcomeUnknownError(f"producer closed with the message in its pipeline; {MAY_BE_WRITTEN}")
