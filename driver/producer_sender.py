"""`Sender`: a `Producer`'s sender thread, which hands what `send` gathered on to the pipeline.

One per Producer, made by it, which runs `run` on its `{name}-sender` thread and ends it by
setting `ProducerState.stopping`. It waits on the state's condition until a batch is ready, the
gathered messages' `linger.ms` has passed, a flush asks, or a topic's held batches can go
(`TopicRoutes.has_answers`); then it takes the batches from the accumulator and hands them on
through the pipeline in use (`TopicRoutes.send`, a bounded number of calls in flight), outside
the lock. While a heal runs it waits, and the batches it handed on are kept (`KeptBatches`, read
by the healer) until their messages end, so that a healed pipeline can take them again.

Calls the accumulator, the `KeptBatches`, the routes (the only actor calls it makes) and the
`Settlement` (`resolve`, `fail_handed_on`) for what could not be handed on.
"""

from __future__ import annotations

import time
from typing import Any

from ..actors.producer_results import Outcome
from ..wire.errors import ProducerClosedError
from .accumulator import Accumulator
from .producer_log_match import KeptBatches, still_open
from .producer_settlement import Settlement
from .producer_state import ProducerState
from .ray_runtime import RaySession

# at most this long (s) a lingered hand-over waits for the messages handed over before it
NAGLE_WAIT = 0.05


class Sender:
    def __init__(self, state: ProducerState, acc: Accumulator, settlement: Settlement, linger: float,
                 heals_on_death: bool, metrics: Any, ray_session: RaySession):
        """`linger`: linger.ms in seconds."""
        self.state = state
        self.acc = acc
        self.settlement = settlement
        self.linger = linger
        self.heals_on_death = heals_on_death
        self.metrics = metrics
        self.ray_session = ray_session
        self.kept = KeptBatches()  # the batches handed on, until their messages end (for a heal)

    def nagle(self) -> None:
        """Nagle's rule for a lingered hand-over: while messages handed over before are still
        unanswered, let new ones gather (up to NAGLE_WAIT s), so that at small linger.ms the
        pipeline gets one call per round trip rather than one per message."""
        deadline = time.monotonic() + NAGLE_WAIT
        acc, state = self.acc, self.state
        with state.cond:
            while (len(state.ledger.singles) > acc.count and not (acc.ready or state.flush_now or state.stopping)
                   and not acc.full):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                state.cond.wait(left)

    def run(self) -> None:
        """Hand gathered messages on (`TopicRoutes`), a bounded number of calls in flight."""
        acc, state = self.acc, self.state
        while True:
            with state.cond:
                while True:
                    if state.healing:  # the pipeline is being rebuilt: what gathers goes after
                        state.cond.wait(1.0)
                        continue
                    if acc.ready or (acc.open and (state.flush_now or state.stopping)):
                        break
                    if state.routes.has_answers():  # a topic's held batches can go now
                        break
                    if acc.open:
                        left = acc.linger_left(self.linger)
                        if left <= 0 or acc.full:
                            break
                        state.cond.wait(left)
                    elif state.stopping:
                        return
                    else:
                        state.cond.wait(1.0)
                lingered = bool(acc.open) and not (acc.ready or state.flush_now or state.stopping or acc.full
                                                   or state.routes.has_answers())
            if lingered:
                self.nagle()
            with state.cond:
                while state.healing:
                    state.cond.wait(1.0)
                batches = acc.take()
                if state.expired_gathered:  # the watchdog ended some before they were handed on
                    batches, state.expired_gathered = still_open(batches, state.ledger), False
                state.flush_now = False
                torn_down = state.torn_down  # close ended a heal before it started a new pipeline
                if self.heals_on_death and not torn_down:
                    self.kept.keep(batches, state.ledger)
                pipeline, routes, state.sender_busy = state.pipeline, state.routes, not torn_down
            if torn_down:  # its actors are gone: what was gathered ends with the close
                unhealed = ProducerClosedError(f"producer closed before its pipeline healed ({state.heal_cause})")
                self.settlement.resolve([Outcome.failed(b.ids, unhealed, b.topic) for b in batches])
                continue
            try:
                self.metrics.handed(batches)
                failed = routes.send(batches)
            finally:
                with state.cond:
                    state.sender_busy = False
                    state.cond.notify_all()
            if failed and self.ray_session.gone():  # shut down under us: the watchdog fails what is left
                return
            self.settlement.fail_handed_on(failed, pipeline)
