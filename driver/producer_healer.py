"""`Healer`: a `Producer`'s rebuilding of its pipeline after one of its actors died.

One per Producer, made by it. `request_heal` is asked by whoever sees a death (the watchdog,
through the Producer's `request_heal`; the sender and the results thread, through the
`Settlement` and the `Poller`) and starts the `{name}-healer` thread once for however many see
it. The heal takes the old pipeline's last reports, kills it, asks the log what it wrote of the
messages it left unanswered (driver/producer_log_match.py: `read_log`, `written_outcomes`), starts a
new pipeline (`ProducerPipeline`, made the one in use by the Producer's `start_pipeline`) and
hands the rest to it again, in id order, before anything sent meanwhile; an attempt that fails is
tried again every HEAL_RETRY s until close. A transactional producer does not heal: its
unresolved messages fail (`fail_unresolved`, the Producer's), and `abort_transaction` renews the
pipeline.

It owns the healer thread and the counts the Producer shows (`healed`, `heals_done`,
`heal_failures`, and `generation`, which names each new pipeline); it reads what the sender kept
(`KeptBatches`) and the `Settlement` noted (`book`, `acked_ends`), and settles through it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..actors.producer_results import Outcome
from ..wire.errors import PipelineError
from .producer_log_match import Heal, KeptBatches, LogRead, read_log, scan_starts, written_outcomes
from .producer_pipeline import CLOSE_MIN, ProducerPipeline
from .producer_poller import LAST_POLL_WAIT
from .producer_settlement import Settlement
from .producer_state import ProducerState
from .ray_runtime import starts_no_ray

log = logging.getLogger("raykafka.producer")

# a heal that could not rebuild the pipeline (no broker reachable, say) tries again this often (s)
HEAL_RETRY = 1.0


class Healer:
    def __init__(self, state: ProducerState, config: Mapping[str, Any], name: str, heals_on_death: bool,
                 settlement: Settlement, kept: KeptBatches, start_pipeline: Callable[[ProducerPipeline], None],
                 pipeline_healed: Callable[[], None], fail_unresolved: Callable[[Exception], None]):
        """`start_pipeline(pipeline)`: the Producer's (makes it the one in use, under the lock);
        `pipeline_healed()`: tells the watchdog; `fail_unresolved(error)`: the Producer's."""
        self.state = state
        self.config = config
        self.name = name
        self.heals_on_death = heals_on_death
        self.settlement = settlement
        self.kept = kept
        self.start_pipeline = start_pipeline
        self.pipeline_healed = pipeline_healed
        self.fail_unresolved = fail_unresolved
        self.thread: threading.Thread | None = None  # the healer thread, while a heal is under way
        self.healed = 0  # how many times the pipeline was rebuilt
        self.heals_done: list[Heal] = []  # each rebuild, with what it found and sent again
        self.heal_failures = 0  # attempts that could not rebuild it (tried again after HEAL_RETRY)
        self.generation = 0  # pipelines started after the first

    def request_heal(self, cause: Any, seen_in: ProducerPipeline | None = None) -> None:
        """An actor of the pipeline died (seen by the watchdog, a failed call or a report, in
        pipeline `seen_in`): rebuild the pipeline on the healer thread, once for however many see
        it; nothing if `seen_in` was healed already."""
        state = self.state
        if not self.heals_on_death:  # transactional: the transaction cannot commit; abort_transaction renews
            if not state.stopping:
                self.fail_unresolved(PipelineError(f"the transaction's pipeline broke: {cause}"))
            return
        with state.cond:
            if state.stopping or self.thread is not None or (seen_in is not None and seen_in is not state.pipeline):
                return
            log.warning("%s: healing the pipeline: %s", self.name, cause)
            state.healing = True
            state.heal_cause = str(cause)
            self.thread = threading.Thread(target=starts_no_ray(self._heal_loop), name=f"{self.name}-healer", daemon=True)
            self.thread.start()
            state.cond.notify_all()

    def _heal_loop(self) -> None:
        state = self.state
        try:
            while True:
                try:
                    self._heal()
                    return
                except Exception as exc:  # e.g. no broker reachable: the watchdog bounds the messages meanwhile
                    self.heal_failures += 1
                    log.warning("%s: healing failed, trying again in %gs: %s", self.name, HEAL_RETRY, exc)
                with state.cond:
                    if state.stopping:
                        return
                    state.cond.wait(HEAL_RETRY)
        finally:
            with state.cond:
                state.healing = False
                self.thread = None
                state.cond.notify_all()

    def _heal(self) -> None:
        """Rebuild the pipeline and send again what the old one left unanswered, in id order.

        1. The last reports of the old pipeline's mailboxes (the RetryHandler's and each live
           BrokerWorker's) are settled, so nothing the old BrokerWorkers answered is sent
           again; then every actor of it is killed. What a dead worker had not handed over is
           the log scan's (2.) to find.
        2. With idempotence, what the log holds of the unanswered messages, written by the old
           producer id after each partition's last acknowledged offset (or, where an older
           message is unanswered, since their time: `scan_starts`), ends as delivered
           (`producer_log_match`).
        3. A new pipeline (a new producer id) takes the rest, before anything sent meanwhile."""
        state, settlement, book = self.state, self.settlement, self.settlement.book
        old = state.pipeline
        t0 = time.monotonic()
        settlement.take_reports(old.last_results(LAST_POLL_WAIT))
        old.kill_all(CLOSE_MIN)
        with state.cond:
            state.torn_down = True
            while state.sender_busy or state.polling:  # calls to the dead pipeline fail at once
                state.cond.wait(1.0)
            batches = self.kept.unresolved(state.ledger)
            ends = scan_starts(settlement.acked_ends, batches, book, state.ledger.open_positions)
            plan = book.scan_plan(state.ledger.open_positions)
        found: list[Outcome] = []
        read = LogRead({}, None)
        if batches and old.producer_id >= 0:
            plan.update(book.unnoted_scans(batches, (old.producer_id, old.producer_epoch)))
            read = read_log(self.config, plan, ends, bump=(old.producer_id, old.producer_epoch))
            found = written_outcomes(batches, read.records, book)
            settlement.resolve(found)
            with state.cond:
                batches = self.kept.unresolved(state.ledger)
        with state.cond:
            if state.stopping:
                return
        pipeline = ProducerPipeline(self.config, self.next_name(), producer_id=read.bumped)
        with state.cond:
            if state.results_stopped:  # close gave up waiting for this heal: nothing may outlive it
                pipeline.kill_all(CLOSE_MIN)
                return
            self.start_pipeline(pipeline)
            batches = self.kept.unresolved(state.ledger)  # the watchdog may have ended some meanwhile
            state.cond.notify_all()
        self.healed += 1
        self.pipeline_healed()
        failed = state.routes.send(batches)
        if any(settlement.heals_from(error) for _, error in failed):
            raise PipelineError(f"the healed pipeline failed at once: {failed[0][1]}")
        heal = Heal(state.heal_cause, time.monotonic() - t0, len(found), sum(len(b) for b in batches),
                    (old.producer_id, pipeline.producer_id), read.bumped is not None)
        self.heals_done.append(heal)
        log.warning("%s: pipeline healed: %s", self.name, heal)
        settlement.fail_handed_on(failed)

    def next_name(self) -> str:
        """The name of the next pipeline: each attempt's actors have names of their own."""
        self.generation += 1
        return f"{self.name}~{self.generation}"
