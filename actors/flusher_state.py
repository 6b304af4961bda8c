"""`FlusherState`: a Flusher's decisions, without Ray or asyncio: what becomes of each batch
once its Produce request is answered, fails, or was held back.

One per Flusher (one per broker, inside its BrokerWorker); the Flusher (actors/flusher.py) owns
the connection and runs on the worker's event loop, and calls this in request order:
`handle_response` / `handle_failure` for a request, `retry_held` for batches held back,
`chaser_back` for a FIN that came through. Every message ends here, in the results (`Outcome`,
with the sequence span of a numbered batch) or back in the retry loop; the Flusher hands both on
with `take_retries` / `take_results`.

- The in-flight ledger: `in_flight`, the requests, held batches, chasers and shutdown marks in
  the order they were put on the connection, each a typed entry.
- The produce-response table (`handle_response`), one switch as Sarama's: success (or
  DUPLICATE_SEQUENCE_NUMBER: written before) → delivered at its offset; a retriable error →
  mute the partition, retry the batch; OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID → the
  same, with a RESET for the partition's LeaderDispatcher; MESSAGE_TOO_LARGE for a batch of
  several records → retry its two halves (not counted); anything else → failed with the cause
  (in a transactional producer, named as Java's `handleFailedBatch` classifies it:
  `ProducerFencedError` or another `TransactionFatalError`, else `TransactionAbortableError`).
- `PartitionMuter`: the partitions held back after a failure (one batch in flight per partition).
- `acked`: the last batch answered with an offset per partition, where a look-up for a batch
  written without its offset starts (`lookup_start`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..wire.errors import BY_NAME, BrokerError, KafkaError, OutcomeUnknownError
from ..wire.transactions import send_error
from .batch import RESET, MessageBatch, timed_out
from .idempotence import SequenceSpan, sequence_span
from .producer_results import Outcome

log = logging.getLogger("raykafka.producer.flusher")

NONE = BY_NAME["NONE"].code
MESSAGE_TOO_LARGE = BY_NAME["MESSAGE_TOO_LARGE"].code
OUT_OF_ORDER_SEQUENCE_NUMBER = BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
DUPLICATE_SEQUENCE_NUMBER = BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code
UNKNOWN_PRODUCER_ID = BY_NAME["UNKNOWN_PRODUCER_ID"].code
UNKNOWN_TOPIC_OR_PARTITION = BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"].code
SEQUENCE_BROKEN = (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID)
WRITTEN = (NONE, DUPLICATE_SEQUENCE_NUMBER)  # answers that say the batch is in the log
LEFT_OUT = "the Produce response left the partition out"  # the cause named for a partition it did not answer
# retriable answers after which the batch may be in the log all the same: the leader appended it
# and then timed out waiting for its replicas (REQUEST_TIMED_OUT), or says so outright
POSSIBLY_APPENDED = (BY_NAME["REQUEST_TIMED_OUT"].code, BY_NAME["NOT_ENOUGH_REPLICAS_AFTER_APPEND"].code)

Partition = tuple[str, int]


class ProduceAnswer(NamedTuple):
    """One partition's part of a Produce response."""

    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    error_message: str | None = None


class Acked(NamedTuple):
    """A partition's last batch answered with an offset."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    next_offset: int


# -- the in-flight ledger's entries, in the order they went on the connection


class InFlightRequest(NamedTuple):
    index: int  # the request's number on this Flusher
    future: Any  # the connection's future for its response
    batches: list[MessageBatch]


class Held(NamedTuple):
    """A batch not sent (its partition muted, or the send failed), with why."""

    batch: MessageBatch
    cause: Exception
    counted: bool  # False only behind a cut (MESSAGE_TOO_LARGE): the batch goes round as the halves do


class HeldBatches(NamedTuple):
    index: int
    held: list[Held]


class Chaser(NamedTuple):
    index: int  # the requests before this one are ahead of it
    batch: MessageBatch  # the FIN


class ShutdownMark(NamedTuple):
    index: int
    done: Any  # the future to complete once everything before is handled


InFlight = InFlightRequest | HeldBatches | Chaser | ShutdownMark


class Mute(NamedTuple):
    """Why a partition is muted."""

    cause: Exception
    index: int  # the request that failed (or could not be sent)
    counted: bool  # False for a cut: the batches held behind it go round uncounted


class PartitionMuter:
    """The partitions one Flusher holds back: Sarama's retry flags, applied where the Java
    producer applies its `muted` partitions, as a request goes on the wire.

    A partition is muted here when one of its batches fails here (an error answer, no answer, a
    dropped connection, a request that could not be sent), and stays muted until its chaser (FIN)
    comes back after every request sent before it, or a SYN opens it again on this broker (its
    LeaderDispatcher chose this broker anew, after the retry). While it is muted, its batches are
    not sent: `hold` picks them out, and they are retried behind the requests already in flight,
    in the order they came.

    One batch in flight per partition, with `max.in.flight.requests.per.connection=1`: `hold` is
    asked once the request's slot is taken, when every request sent before it has its answer
    handled. So a batch never leaves while an earlier batch of its partition has a fate still
    unknown: that batch was answered (written, or failed for good), or it failed and is on its
    way round the retry loop, and the partition is muted. Across brokers nothing more is needed:
    a LeaderDispatcher moves a partition to another broker only for a batch that came back from
    the retry loop, so only once the old broker's Flusher muted it; it holds the partition's new
    batches until the chaser is back from the old broker; and the retries reach it in the order
    the old broker's Flusher handled them.

    A partition muted by a cut (a batch refused with MESSAGE_TOO_LARGE, sent again in halves) holds
    its batches uncounted, as the halves go: none of them failed, so with `retries=0` the second
    half, held behind the first half's own cut, is cut or written in its turn. A cut behind a
    failure leaves the failure's cause, counted, for what the partition holds.

    It costs nothing while no partition is muted (`hold` sees an empty dict); after a failure, the
    batches of the partition that were waiting for the wire go round the retry loop (with
    idempotence they would have been answered OUT_OF_ORDER_SEQUENCE_NUMBER instead).
    """

    def __init__(self, path: str = "producer/broker"):
        self.path = path
        self.muted: dict[Partition, Mute] = {}

    def __contains__(self, tp: Partition) -> bool:
        return tp in self.muted

    def mute(self, tp: Partition, cause: Exception, index: int, counted: bool = True) -> None:
        """A batch of `tp` failed in request `index` (or could not be sent as request `index`);
        `counted=False`: it was cut, not failed."""
        before = self.muted.get(tp)
        if before is None:
            log.info("%s state change to [retrying] on %s/%d because %s", self.path, *tp, cause)
        elif before.counted and not counted:  # a cut behind a failure: what is held waits on the failure
            cause, counted = before.cause, True
        self.muted[tp] = Mute(cause, index, counted)

    def open(self, tp: Partition) -> None:
        """SYN: the partition starts again on this broker."""
        if self.muted.pop(tp, None) is not None:
            log.info("%s state change to [open] on %s/%d", self.path, *tp)

    def chased(self, tp: Partition, index: int) -> None:
        """The partition's chaser came back, after every request before request `index`: a mute
        from one of them is over (a later failure keeps the partition muted)."""
        muted = self.muted.get(tp)
        if muted is not None and muted.index < index:
            del self.muted[tp]
            log.info("%s state change to [closed] on %s/%d", self.path, *tp)

    def why_held(self, held: Held, index: int) -> tuple[Exception, bool]:
        """The cause a batch held as request `index` goes round with, and whether it counts: as
        held, unless it was held behind a cut and the partition has since failed in a request
        before `index` (a failure counts, whatever came first)."""
        mute = self.muted.get((held.batch.topic, held.batch.partition))
        if not held.counted and mute is not None and mute.counted and mute.index < index:
            return mute.cause, True
        return held.cause, held.counted

    def hold(self, batches: Iterable[MessageBatch]) -> list[Held]:
        """The batches of muted partitions, each with its partition's cause (to be retried)."""
        if not self.muted:
            return []
        return [Held(b, mute.cause, mute.counted) for b in batches
                if (mute := self.muted.get((b.topic, b.partition))) is not None]


class _Unobserved:
    """The observer of a FlusherState nobody watches."""

    def broker_error(self, error: BaseException) -> None:
        pass

    def retried(self, batch: MessageBatch) -> None:
        pass

    def acked(self, batch: MessageBatch) -> None:
        pass


class FlusherState:
    def __init__(self, path: str, *, max_retries: int, delivery_timeout_ms: int, observer: Any = None,
                 transactional: bool = False):
        self.path = path
        self.transactional = transactional  # a failed batch names what it makes of the transaction
        # told of each broker error, retry and acknowledged batch (the actor's metrics); nothing if None
        self.observer = observer if observer is not None else _Unobserved()
        self.max_retries = max_retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.muter = PartitionMuter(path)
        self.in_flight: deque[InFlight] = deque()
        self.acked: dict[Partition, Acked] = {}
        self._retry_out: list[MessageBatch] = []
        self._results_out: list[Outcome] = []
        self._spans_out: list[SequenceSpan] = []  # the sequence numbers of the batches in _results_out

    # -- the in-flight ledger ------------------------------------------------------

    def requests_in_flight(self) -> bool:
        return any(isinstance(entry, InFlightRequest) for entry in self.in_flight)

    def next_answered(self) -> bool:
        """Whether the next request in flight has its response already."""
        return bool(self.in_flight) and isinstance(self.in_flight[0], InFlightRequest) \
            and self.in_flight[0].future.done()

    # -- decisions, in request order ------------------------------------------------

    def needs_lookup(self, answer: ProduceAnswer | None) -> bool:
        """Written, but without its offset (tansu 0.6 answers a duplicate so): look it up."""
        return answer is not None and answer.error_code in WRITTEN and answer.base_offset < 0

    def lookup_start(self, batch: MessageBatch) -> int:
        """Where to read the partition's log from to find `batch`: just past the last batch of
        the same producer id and epoch answered with an offset, if it came before; else 0."""
        acked = self.acked.get((batch.topic, batch.partition))
        if acked is not None and (acked.producer_id, acked.producer_epoch) == (batch.producer_id, batch.producer_epoch) \
                and acked.base_sequence < batch.base_sequence:
            return acked.next_offset
        return 0

    def handle_response(self, index: int, batches: list[MessageBatch], answers: dict[Partition, ProduceAnswer],
                        located: dict[Partition, int | Exception]) -> None:
        """Request `index` was answered: each batch delivered, retried or failed (`located`: the
        offsets looked up for batches written without one, or why they could not be)."""
        for batch in batches:
            tp = (batch.topic, batch.partition)
            answer = answers.get(tp)
            if answer is None:  # the answer leaves the partition out: the broker may have appended it all the same
                answer = ProduceAnswer(UNKNOWN_TOPIC_OR_PARTITION, error_message=LEFT_OUT)
                batch.possibly_written = True
            code = answer.error_code
            if code in WRITTEN:
                offset = located.get(tp, answer.base_offset)
                if isinstance(offset, Exception):
                    self.report_error(batch, offset)
                else:
                    self.succeed_at(batch, offset, answer.log_append_time_ms)
                continue
            error = BrokerError(code, f"{self.path}: produce to {batch.topic}/{batch.partition}", answer.error_message)
            self.observer.broker_error(error)
            if code == MESSAGE_TOO_LARGE and len(batch) > 1:
                # over the broker's message.max.bytes, so not written: as the Java producer, cut in
                # two and send each half on its own, in order (the halves' sequences follow on);
                # a cut is not a retry. A single record that is too large fails with the cause.
                self.muter.mute(tp, error, index, counted=False)
                half = len(batch) // 2
                for piece in (batch.slice(0, half), batch.slice(half, len(batch))):
                    self.retry_message(piece, error, counted=False)
            elif code in SEQUENCE_BROKEN and batch.producer_id >= 0:
                # not written. Either an earlier batch of the partition is still unresolved (it failed
                # or went unanswered and comes round again: retrying is enough), or the broker lost
                # this producer's sequence: the LeaderDispatcher tells the two apart (RESET) and only
                # in the second case numbers the partition again under a new producer id
                reset = MessageBatch.control(batch.topic, batch.partition, RESET)
                reset.producer_id, reset.numbering = batch.producer_id, batch.numbering
                reset.base_sequence = batch.base_sequence
                self._retry_out.append(reset)
                self.muter.mute(tp, error, index)
                self.retry_message(batch, error)
            elif error.retriable or tp in self.muter:
                if code in POSSIBLY_APPENDED:
                    batch.possibly_written = True
                self.muter.mute(tp, error, index)
                self.retry_message(batch, error)
            elif self.transactional:  # fenced (fatal), unauthorized (fatal), or the transaction must abort
                self.report_error(batch, send_error(code, f"{self.path}: produce to {batch.topic}/{batch.partition}"))
            else:
                self.report_error(batch, error)

    def handle_failure(self, index: int, batches: list[MessageBatch], error: Exception) -> None:
        """Request `index` got no answer (dropped connection, timeout): every batch in it is retried."""
        log.info("%s request %d failed: %s", self.path, index, error)
        for batch in batches:
            batch.possibly_written = True
            self.muter.mute((batch.topic, batch.partition), error, index)
            self.retry_message(batch, error)

    def not_sent(self, index: int, batches: list[MessageBatch], error: Exception) -> HeldBatches:
        """Request `index` could not be sent: its batches are muted and held, to be retried
        behind the requests already in flight."""
        log.info("%s request %d not sent: %s", self.path, index, error)
        for batch in batches:
            self.muter.mute((batch.topic, batch.partition), error, index)
        return HeldBatches(index, [Held(batch, error, counted=True) for batch in batches])

    def retry_held(self, entry: HeldBatches) -> None:
        for held in entry.held:
            self.retry_message(held.batch, *self.muter.why_held(held, entry.index))

    def chaser_back(self, entry: Chaser) -> None:
        """The FIN came through after every request before it: its partition may open again."""
        self.muter.chased((entry.batch.topic, entry.batch.partition), entry.index)
        self.retry_message(entry.batch, KafkaError("chaser"))

    # -- every message ends here: in the results or back in the retry loop -----------

    def retry_message(self, batch: MessageBatch, cause: Exception, counted: bool = True,
                      now_ms: float | None = None) -> None:
        """Sarama's retryMessage: give up once `retries` are spent (a round that is no retry, not
        `counted`, spends none: a cut batch's half, a batch held behind a cut) or past
        delivery.timeout.ms, else count up and hand to the retry handler."""
        if not batch.is_control:
            if counted and batch.spent_retries >= self.max_retries:
                self.report_error(batch, self._unknown(batch, cause) if batch.possibly_written else cause)
                return
            now_ms = time.time() * 1000 if now_ms is None else now_ms
            if batch.created_ms and now_ms - batch.created_ms > self.delivery_timeout_ms:
                self.report_error(batch, timed_out(batch.possibly_written, self.delivery_timeout_ms,
                                                   f"after {batch.retries} retries; last error: {cause}"))
                return
        self.observer.retried(batch)
        batch.retries += 1
        if not counted:
            batch.uncounted += 1
        self._retry_out.append(batch)

    def _unknown(self, batch: MessageBatch, cause: Exception) -> OutcomeUnknownError:
        """Giving up on a batch the broker may have written (`possibly_written`)."""
        error = OutcomeUnknownError(f"outcome unknown after {batch.retries} retries: a request that carried it "
                                    f"may have been written; last error: {cause}")
        error.__cause__ = cause
        return error

    def succeed_at(self, batch: MessageBatch, offset: int, append_time: int = -1) -> None:
        """The batch is written at `offset` (-1 only with acks=0, where nothing tells it)."""
        if offset >= 0 and batch.producer_id >= 0:
            self.acked[(batch.topic, batch.partition)] = Acked(batch.producer_id, batch.producer_epoch,
                                                               batch.base_sequence, offset + len(batch))
        self._results_out.append(Outcome(batch.ids, batch.topic, batch.partition, offset, append_time))
        self.observer.acked(batch)
        self._note_span(batch)

    def report_error(self, batch: MessageBatch, error: Exception) -> None:
        if len(batch.ids):
            self._results_out.append(Outcome.failed(batch.ids, error, batch.topic, batch.partition))
            self._note_span(batch)

    def _note_span(self, batch: MessageBatch) -> None:
        span = sequence_span(batch)
        if span is not None:
            self._spans_out.append(span)

    def take_retries(self) -> list[MessageBatch]:
        out, self._retry_out = self._retry_out, []
        return out

    def take_results(self) -> tuple[list[Outcome], list[SequenceSpan]]:
        out, spans = self._results_out, self._spans_out
        self._results_out, self._spans_out = [], []
        return out, spans
