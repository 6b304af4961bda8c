"""`Settlement`: how a `Producer` ends its messages once their outcomes are known.

One per Producer, made by it. Called by the results thread (driver/producer_poller.py: `take_reports`),
the sender (driver/producer_sender.py: `resolve`, `fail_handed_on`), the healer
(driver/producer_healer.py) and the Producer itself (its watchdog's `expire`, `send_batch`,
`close`). It ends the messages an outcome names in the ledger (under the `ProducerState`'s lock),
then sets their futures (driver/message_futures.py) and reports them to `successes()`, `errors()`
and `on_delivery` outside it. An outcome failed by an actor's death does not end its messages in
a producer that heals: it asks for a heal instead (`request_heal`, the Producer's), and they go
again through the healed pipeline.

It is the one writer of what a heal reads of the outcomes: the `SequenceBook` (which message each
numbered record is) and the acknowledged ends of each partition (`acked_ends`). It keeps the
threads inside the caller's callbacks, `on_delivery` or a future's (`in_callback`), which
`flush` and `close` ask about.

Calls the ledger, the futures, the open transaction (`note_outcomes`) and the caller's callback;
no actor and no Ray.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..actors.producer_results import Outcome, Reports
from ..wire.errors import PipelineError
from .message_futures import set_future, settle_futures
from .producer_ledger import RecordMetadata, Settled
from .producer_log_match import AckedEnd, SequenceBook, acked_ends
from .producer_state import ProducerState

log = logging.getLogger("raykafka.producer")


class Settlement:
    def __init__(self, state: ProducerState, name: str, metrics: Any, heals_on_death: bool,
                 on_delivery: Callable[[RecordMetadata | None, Exception | None], None] | None,
                 return_successes: bool, return_errors: bool,
                 request_heal: Callable[[Any, Any], None], transactions: Callable[[], Any]):
        """`request_heal(cause, pipeline)`: the Producer's; `transactions()`: its open
        `ProducerTransactions`, or None (replaced when a transactional pipeline is renewed)."""
        self.state = state
        self.name = name
        self.metrics = metrics
        self.heals_on_death = heals_on_death
        self.on_delivery = on_delivery
        self.request_heal = request_heal
        self.transactions = transactions
        self.callback_threads: set[int] = set()  # the threads running the caller's callbacks now (`calling_back`)
        self.successes: queue.Queue | None = queue.Queue() if return_successes else None
        self.errors: queue.Queue | None = queue.Queue() if return_errors else None
        self.book = SequenceBook()  # which message each numbered record is, until it ends
        self.acked_ends: dict[tuple[str, int], AckedEnd] = {}  # (topic, partition) -> where its acked messages end

    def heals_from(self, error: Exception | None) -> bool:
        """Whether `error` is an actor's death (or failure) this producer heals from."""
        return self.heals_on_death and isinstance(error, PipelineError) and not self.state.stopping

    def take_reports(self, reports: Reports | None, pipeline: Any = None) -> None:
        """What a poll of a mailbox gave: the numbered batches to the book (a producer that
        heals), then the outcomes settled."""
        if reports is None:
            return
        if reports.numbered and self.heals_on_death:
            with self.state.cond:
                self.book.add(reports.numbered, self.state.ledger)
        if reports.outcomes:
            self.resolve(reports.outcomes, pipeline)

    def fail_gathered(self, gathered: list[tuple[str, Any]], error: Exception) -> None:
        """End with `error` the messages `Accumulator.drop` took: (topic, ids) still gathered in
        the driver, never handed on (so not written)."""
        self.resolve([Outcome.failed(ids, error, topic) for topic, ids in gathered])

    def fail_handed_on(self, failed: list[tuple[list[Any], Exception]], pipeline: Any = None) -> None:
        """Batches whose hand-over (to `pipeline`) failed (`TopicRoutes`): each ends with its call's
        cause, unless the cause is an actor's death the producer heals from (then they go again
        through the healed pipeline)."""
        for lost, error in failed:
            if self.heals_from(error):
                self.request_heal(error, pipeline)
                continue
            log.error("%s: handing %d batch(es) to the pipeline failed: %s", self.name, len(lost), error)
            self.resolve([Outcome.failed(b.ids, error, b.topic) for b in lost])

    def resolve(self, entries: list[Outcome], pipeline: Any = None) -> None:
        """End the messages these outcomes name (the ledger), then set their futures and report
        them, outside the lock. An outcome of `pipeline` failed by an actor's death does not end
        its messages when the producer heals: they go again, through the healed pipeline."""
        state = self.state
        if self.heals_on_death and not state.stopping and any(isinstance(e.error, PipelineError) for e in entries):
            self.request_heal(next(e.error for e in entries if isinstance(e.error, PipelineError)), pipeline)
            entries = [e for e in entries if not isinstance(e.error, PipelineError)]
        with state.cond:
            if self.heals_on_death:
                acked_ends(self.acked_ends, entries)
            settled = state.ledger.settle(entries, self.metrics.resolved)
            state.settling += 1  # flush() waits until these futures are set too
        try:
            transactions = self.transactions()
            if transactions is not None:  # a failed message keeps its transaction from committing
                transactions.note_outcomes(entries)
            with self.calling_back():  # the caller's code runs here: its futures' callbacks, on_delivery
                self.complete_finished()
                for future, meta, error in settle_futures(state.futures_condition, settled):
                    set_future(future, meta, error)
                if self.successes is not None or self.errors is not None or self.on_delivery is not None:
                    self.report(settled)
        finally:
            with state.cond:
                state.settling -= 1
                state.cond.notify_all()

    def report(self, settled: list[Settled]) -> None:
        """Each outcome to `successes()` / `errors()` and `on_delivery`, whatever its future's
        caller did with it (a cancelled future's message is reported too)."""
        for _future, meta, error in settled:
            if error is None and self.successes is not None:
                self.successes.put(meta)  # unbounded: a reader that never comes holds up nobody
            elif error is not None and self.errors is not None:
                self.errors.put(error)
            if self.on_delivery is not None:
                try:
                    self.deliver(meta, error)
                except BaseException:  # noqa: B036 - even SystemExit: this thread settles every later message
                    log.exception("%s: on_delivery callback raised", self.name)

    def deliver(self, meta: RecordMetadata | None, error: Exception | None) -> None:
        """One `on_delivery` call (`report` makes it only when there is one, inside
        `calling_back`)."""
        assert self.on_delivery is not None
        self.on_delivery(meta, error)

    @contextmanager
    def calling_back(self) -> Iterator[None]:
        """Meanwhile the calling thread runs the caller's code (a future's done-callbacks, which
        setting it calls, and `on_delivery`) and is known by its identity (`in_callback`): while
        it does, flush() and close() there would wait for the outcomes this very thread is
        settling (`settling` is raised), so flush() raises and close() is close(0). Nested calls
        (a callback that closes the producer settles what that fails, within) keep it known until
        the outermost ends."""
        me = threading.get_ident()
        within = me in self.callback_threads
        self.callback_threads.add(me)
        try:
            yield
        finally:
            if not within:
                self.callback_threads.discard(me)

    def in_callback(self) -> bool:
        """Whether the calling thread is inside a callback of this producer's outcomes (`calling_back`)."""
        return threading.get_ident() in self.callback_threads

    def complete_finished(self) -> None:
        """Set the futures of the `send_batch` calls whose every message has ended."""
        with self.state.lock:
            finished = self.state.ledger.take_finished()
        for batch in finished:
            set_future(batch.future, batch.result(), None)
