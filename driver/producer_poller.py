"""`Poller`: a `Producer`'s results thread, which long-polls the pipeline's mailboxes.

One per Producer, made by it, which runs `run` on its `{name}-results` thread. Each round it
polls the mailboxes of the pipeline in use (`ReportSources`: the RetryHandler's and each
BrokerWorker's, one poll in flight to each) and hands what they gave to the `Settlement`
(`take_reports`). A source whose poll failed is judged here: a worker that exited on purpose is
dropped, any other failure is an actor's death, healed (`request_heal`, the Producer's) or, for a
transactional producer, left to the watchdog. While a heal runs it settles the polls in flight
and waits (the healer takes the old pipeline's last reports); it ends when close sets
`ProducerState.results_stopped` (close then takes the last reports itself), or when Ray is shut
down under it (`ray_gone`, the Producer's).

Calls Ray (is it up) and the pipeline's `ReportSources`; the flags it reads and sets are the
`ProducerState`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from ..actors.calls import pipeline_error
from .producer_reports import Polled, intended_exit
from .producer_settlement import Settlement
from .producer_state import ProducerState
from .ray_runtime import RaySession

log = logging.getLogger("raykafka.producer")

# the results thread's long poll of each mailbox waits this long (s) for news
POLL_WAIT = 0.2
# a heal or close waits up to this long (s) for the polls in flight, and for each step of the last poll
LAST_POLL_WAIT = 5.0
# seconds a failed poll waits for `ray.shutdown`, under way in another thread, to show: its actors
# go before `ray.is_initialized()` turns false, and a poll failing between is the shutdown's
SHUTDOWN_SHOWS = 2.0


class Poller:
    def __init__(self, state: ProducerState, settlement: Settlement, name: str, ray_session: RaySession,
                 request_heal: Callable[[Any, Any], None], ray_gone: Callable[[], None]):
        """`request_heal(cause, pipeline)` and `ray_gone()`: the Producer's."""
        self.state = state
        self.settlement = settlement
        self.name = name
        self.ray_session = ray_session
        self.request_heal = request_heal
        self.ray_gone = ray_gone

    def run(self) -> None:
        """Long-poll the pipeline's mailboxes (`ReportSources`: the RetryHandler's and each
        BrokerWorker's, one poll in flight to each) and settle what they hand over, until close
        stops it (which then takes the last reports itself). While a heal runs it settles the
        polls in flight, then waits: the healer takes the last reports."""
        state = self.state
        while True:
            if not ray.is_initialized():  # shut down under us: a call now would start a new Ray (its auto-init)
                self.ray_gone()
                return
            with state.cond:
                stop = state.results_stopped or (state.stopping and not state.ledger)
                pause = stop or state.healing
                pipeline = state.pipeline
                state.polling = True
            try:
                polled = pipeline.reports.settle(LAST_POLL_WAIT) if pause else pipeline.reports.round(POLL_WAIT)
            except Exception as exc:
                self.done_polling()
                if shut_down_within(self.ray_session, SHUTDOWN_SHOWS):
                    self.ray_gone()
                    return
                log.error("%s: polling the results failed: %s", self.name, exc)
                continue
            try:
                self.take_polled(polled, pipeline)
            except Exception:  # a bug here must not stop every later message from resolving
                log.exception("%s: settling %d reports failed", self.name, len(polled.reports))
            finally:
                self.done_polling()
            if pause:
                with state.cond:
                    while state.healing and not state.results_stopped:  # the healer takes the last reports
                        state.cond.wait(1.0)
                    if stop:
                        return

    def take_polled(self, polled: Polled, pipeline: Any) -> None:
        """A round's answers settled; a source whose poll failed judged: a worker that exited on
        purpose is dropped, any other is an actor's death (healed, or for a transactional
        producer left to the watchdog)."""
        for reports in polled.reports:
            self.settlement.take_reports(reports, pipeline)
        if polled.failed and self.ray_session.gone():  # shut down under us: the watchdog sees it
            return
        for name, exc in polled.failed:
            who = name or "the retry handler"
            if intended_exit(exc):
                log.warning("%s: %s exited with outcomes nobody polled", self.name, who)
                continue
            with self.state.cond:
                if self.state.stopping:
                    continue
            error = pipeline_error(exc)
            if self.settlement.heals_from(error):
                self.request_heal(error, pipeline)
            else:  # transactional: until abort_transaction replaces the pipeline, the watchdog bounds them
                log.error("%s: %s; messages unresolved now end by delivery.timeout.ms", self.name, error)

    def done_polling(self) -> None:
        with self.state.cond:
            self.state.polling = False
            self.state.cond.notify_all()


def shut_down_within(session: RaySession, seconds: float) -> bool:
    """Whether `session`'s Ray is shut down, or is by the end of `seconds` (looked at every POLL_WAIT)."""
    deadline = time.monotonic() + seconds
    while not session.gone():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_WAIT)
    return True
