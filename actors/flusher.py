"""Flusher: one per broker. Builds Produce requests from its Aggregator's sets, keeps up to
`max.in.flight.requests.per.connection` of them on the broker connection, and handles the
responses in the order the requests were sent.

Called by its Aggregator only (`flush(seq, entries)`; an async actor may start calls out of
order, so it runs them by `seq`). Calls the ProducerResults (successes and final errors) and the
RetryHandler (messages to retry; it holds a reference there, released after its last response).

Response handling is one switch, as Sarama's: success (or DUPLICATE_SEQUENCE_NUMBER: written
before) → results, with the batch's offset (an answer without one, as tansu 0.6 gives a duplicate,
has it looked up in the log first: `_locate_written`; not found → UnknownOffsetError); a retriable error or a dropped connection → mute the partition and retry the
batch (`retry_message`: give up at `retries` or past `delivery.timeout.ms`, with the cause);
OUT_OF_ORDER_SEQUENCE_NUMBER → the same, telling the partition's LeaderDispatcher in-band (RESET),
which takes a new producer id if no earlier batch of the partition is unresolved;
MESSAGE_TOO_LARGE for a batch of several records → mute the partition and retry each of the
batch's two halves on its own (as the Java producer; not counted against `retries`); anything
else → an error naming the cause. A failure mutes the partition here (`PartitionMuter`): its
batches are retried without being sent, until its chaser (FIN) comes through after every request
sent before it, or a SYN opens the partition on a new path. Whether a batch is held is decided
as its request goes on the wire, so with one request in flight per connection a partition has
one batch in flight, and its next one leaves only once that one's fate is known: order holds
without idempotence, across leader moves too (see `PartitionMuter`).

With compression, the Aggregator sizes batches by an estimate of each topic's compression ratio;
`flush` returns the ratios measured since, to correct it. A batch whose first compression comes
out larger than `max.request.size` (the estimate was too hopeful) is cut into pieces that fit,
sent in consecutive requests; with idempotence the pieces keep consecutive sequence numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from ..wire import messages
from ..wire.compression import Compression
from ..wire.connection import BrokerConnection, security_from_config
from ..wire.errors import BrokerError, DeliveryTimeoutError, KafkaError, UnknownOffsetError, code_for
from ..wire.fetch import find_batch_offset
from ..wire.records import encode_record_batch_parts, prepare_columnar
from .batch import FIN, RESET, SHUTDOWN, SYN, MessageBatch
from .metrics import FlusherMetrics
from .shared_column import read_fetched, shared_refs

log = logging.getLogger("raykafka.producer.flusher")

MESSAGE_TOO_LARGE = 10
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
UNKNOWN_PRODUCER_ID = 59
SEQUENCE_BROKEN = (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID)
LOOKUP_MAX_BYTES = 64 << 20  # read at most this much of a partition's log to find a written batch
LOOKUP_ATTEMPTS = 3  # look-up requests lost with their connection before giving up

Partition = tuple[str, int]


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

    It costs nothing while no partition is muted (`hold` sees an empty dict); after a failure, the
    batches of the partition that were waiting for the wire go round the retry loop (with
    idempotence they would have been answered OUT_OF_ORDER_SEQUENCE_NUMBER instead).
    """

    def __init__(self, path: str = "producer/broker"):
        self.path = path
        self.muted: dict[Partition, tuple[Exception, int]] = {}  # partition -> (cause, request index)

    def __contains__(self, tp: Partition) -> bool:
        return tp in self.muted

    def mute(self, tp: Partition, cause: Exception, index: int) -> None:
        """A batch of `tp` failed in request `index` (or could not be sent as request `index`)."""
        if tp not in self.muted:
            log.info("%s state change to [retrying] on %s/%d because %s", self.path, *tp, cause)
        self.muted[tp] = (cause, index)

    def open(self, tp: Partition) -> None:
        """SYN: the partition starts again on this broker."""
        if self.muted.pop(tp, None) is not None:
            log.info("%s state change to [open] on %s/%d", self.path, *tp)

    def chased(self, tp: Partition, index: int) -> None:
        """The partition's chaser came back, after every request before request `index`: a mute
        from one of them is over (a later failure keeps the partition muted)."""
        muted = self.muted.get(tp)
        if muted is not None and muted[1] < index:
            del self.muted[tp]
            log.info("%s state change to [closed] on %s/%d", self.path, *tp)

    def hold(self, batches: Iterable[MessageBatch]) -> list[tuple[MessageBatch, Exception]]:
        """The batches of muted partitions, each with its partition's cause (to be retried)."""
        if not self.muted:
            return []
        return [(b, self.muted[(b.topic, b.partition)][0]) for b in batches if (b.topic, b.partition) in self.muted]


class Flusher:
    def __init__(self, ctx: Any, node_id: int, host: str, port: int):
        config = ctx.config
        self.ctx = ctx
        self.node_id = node_id
        self.path = f"producer/broker/{node_id}"
        ssl_context, sasl = security_from_config(config)
        self.conn, self.lookup_conn = (
            BrokerConnection(host, port, node_id=node_id, client_id=config["client.id"],
                             request_timeout_ms=config["request.timeout.ms"],
                             connect_timeout_ms=config["socket.connection.setup.timeout.ms"],
                             ssl_context=ssl_context, sasl=sasl) for _ in range(2))  # the second: `_locate_written`
        # partition -> (producer id, epoch, base sequence, next offset) of its last batch answered with an offset
        self.acked: dict[Partition, tuple[int, int, int, int]] = {}
        self.acks = config["acks"]
        self.timeout_ms = config["request.timeout.ms"]
        self.codec = int(Compression.from_name(config["compression.type"]))
        self.max_retries = config["retries"]
        self.delivery_timeout_ms = config["delivery.timeout.ms"]
        self.max_in_flight = config["max.in.flight.requests.per.connection"]
        self.max_request_size = config["max.request.size"]
        self.ratios: dict[str, float] = {}  # topic -> compressed bytes per record byte, measured since the last flush
        self.inbox: dict[int, tuple[list, asyncio.Future]] = {}
        self.next_seq = 0
        self.muter = PartitionMuter(self.path)
        self.metrics = FlusherMetrics(ctx.prefix.rstrip("/"), node_id)
        self.in_flight: deque[tuple] = deque()
        self.request_index = 0
        self.calls: list[Any] = []  # refs of calls to the results and the retry handler
        self._started = False
        self._retry_out: list[MessageBatch] = []
        self._results_out: list[tuple] = []
        self._spans_out: list[tuple] = []  # the sequence numbers of the batches in _results_out
        prepare_columnar()  # at start-up, not on the first large batch

    def ping(self) -> bool:
        return True

    def metrics_snapshot(self) -> dict[str, Any]:
        return self.metrics.stats.snapshot()

    async def flush(self, seq: int, entries: list) -> dict[str, float]:
        """Queue the Aggregator's `seq`-th call; returns once its requests are on the wire, with the
        compression ratios measured since the last call returned."""
        if not self._started:
            self._start()
        done = asyncio.get_running_loop().create_future()
        self.inbox[seq] = (entries, done)
        self.new_work.set()
        await done
        ratios, self.ratios = self.ratios, {}
        return ratios

    def _start(self) -> None:
        self._started = True
        self.new_work = asyncio.Event()
        self.responses = asyncio.Event()
        self.handled = asyncio.Event()  # set each time the receiver is done with an entry
        self.slots = asyncio.Semaphore(self.max_in_flight)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._sender()), loop.create_task(self._receiver())]

    # -- sending, in the Aggregator's order ---------------------------------------

    async def _sender(self) -> None:
        while True:
            while self.next_seq not in self.inbox:
                self.new_work.clear()
                await self.new_work.wait()
            entries, done = self.inbox.pop(self.next_seq)
            self.next_seq += 1
            try:
                for kind, item in entries:
                    if kind == "control":
                        self._control(item, done)
                    else:
                        await self._send(item)
            except Exception as exc:  # a bug: fail loudly to the Aggregator, keep serving
                log.exception("%s sending failed", self.path)
                if not done.done():
                    done.set_exception(exc)
            if not done.done() and not any(k == "control" and i.flags & SHUTDOWN for k, i in entries):
                done.set_result(None)
            self._flush_calls()

    def _control(self, batch: MessageBatch, done: asyncio.Future) -> None:
        tp = (batch.topic, batch.partition)
        if batch.flags & SYN:
            self.muter.open(tp)
        elif batch.flags & FIN:
            self.in_flight.append(("fin", self.request_index, batch))
            self.responses.set()
        elif batch.flags & SHUTDOWN:
            self.in_flight.append(("shutdown", self.request_index, done))
            self.responses.set()

    async def _send(self, batches: list[MessageBatch]) -> None:
        if not self.conn.connected:
            # the connection died with requests on it: learn their fate (and flag their partitions)
            # before a new connection carries later batches ahead of them
            while any(entry[0] == "request" for entry in self.in_flight):
                self.handled.clear()
                await self.handled.wait()
        try:
            values = await self._values(batches)
        except Exception as exc:  # the values are gone from the object store (their owner died)
            for batch in batches:
                self._report_error(batch, KafkaError(f"{self.path}: the batch's values could not be read: {exc}"))
            return
        rounds: list[list[tuple[MessageBatch, tuple]]] = [[]]
        for batch, column in zip(batches, values, strict=True):
            for i, piece in enumerate(self._encode(batch, column)):  # a cut batch's pieces: one per request
                if i == len(rounds):
                    rounds.append([])
                rounds[i].append(piece)
        for encoded in rounds:
            await self._send_request(encoded)

    async def _send_request(self, encoded: list[tuple[MessageBatch, tuple]]) -> None:
        """One Produce request of encoded record batches (at most one per partition), less those
        of muted partitions, which are retried behind the requests already in flight."""
        await self.slots.acquire()
        index = self.request_index
        self.request_index += 1
        try:
            if not self.conn.connected:
                await self.conn.connect()
            held = self.muter.hold(batch for batch, _ in encoded)  # asked now: every answer before is in
            if held:
                self.in_flight.append(("held", index, held))
                self.responses.set()
                encoded = [(batch, records) for batch, records in encoded if (batch.topic, batch.partition)
                           not in self.muter]
                if not encoded:
                    self.slots.release()
                    return
            ready = [batch for batch, _ in encoded]
            body = self._request_body(encoded)
            future = self.conn.send_nowait(messages.PRODUCE, body, expect_response=self.acks != 0)
        except KafkaError as exc:  # not sent: retried behind the requests already in flight
            self.slots.release()
            log.info("%s request %d not sent: %s", self.path, index, exc)
            ready = [batch for batch, _ in encoded]
            for batch in ready:
                self.muter.mute((batch.topic, batch.partition), exc, index)
            self.in_flight.append(("held", index, [(batch, exc) for batch in ready]))
            self.responses.set()
            return
        if future is None:  # acks=0: nothing will tell us more
            self.slots.release()
            for batch in ready:
                self._succeed_at(batch, -1)
            return
        self.in_flight.append(("request", index, future, ready))
        self.metrics.request_sent(encoded)
        self.responses.set()

    @staticmethod
    async def _values(batches: list[MessageBatch]) -> list[Any]:
        """Each batch's values, those the driver left in the object store read as views (see
        `SharedColumn`). The batch keeps its SharedColumn: a retry carries positions again."""
        columns = [b.values for b in batches]
        refs = shared_refs(columns)
        if not refs:
            return columns
        return read_fetched(columns, refs, await asyncio.gather(*refs))

    def _encode(self, b: MessageBatch, column: Any) -> list[tuple[MessageBatch, tuple]]:
        """The batch as one record batch; or, when compression did worse than the Aggregator
        estimated and it is larger than max.request.size, cut into pieces that each fit."""
        records = encode_record_batch_parts(
            column, b.keys, b.timestamps, b.headers, compression=self.codec,
            producer_id=b.producer_id, producer_epoch=b.producer_epoch, base_sequence=b.base_sequence)
        if not self.codec:
            return [(b, records)]
        size = sum(len(part) for part in records)
        if b.nbytes:
            self.ratios[b.topic] = max(self.ratios.get(b.topic, 0.0), size / b.nbytes)
        n = len(b)
        if size <= self.max_request_size or n == 1 or b.retries:  # a retry goes as it went before
            return [(b, records)]
        step = -(-n // -(-size // (self.max_request_size * 9 // 10)))
        log.info("%s %s/%d: %d records compressed to %d bytes, over max.request.size: sent in pieces of %d",
                 self.path, b.topic, b.partition, n, size, step)
        return [piece for lo in range(0, n, step)
                for piece in self._encode(b.slice(lo, min(n, lo + step)), column[lo:min(n, lo + step)])]

    def _request_body(self, encoded: list[tuple[MessageBatch, tuple]]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for b, records in encoded:
            topics.setdefault(b.topic, []).append({"index": b.partition, "records": records})
        return {"transactional_id": None, "acks": self.acks, "timeout_ms": self.timeout_ms,
                "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]}

    # -- responses, in request order ------------------------------------------------

    async def _receiver(self) -> None:
        while True:
            while not self.in_flight:
                self.responses.clear()
                await self.responses.wait()
            head = self.in_flight[0]
            kind = head[0]
            if kind == "request":
                _, index, future, batches = head
                try:
                    response = await self.conn.wait(future, messages.PRODUCE)
                    error = None
                except KafkaError as exc:
                    response, error = None, exc
                except Exception as exc:  # decoding trouble: the batch's fate is unknown, retry it
                    response, error = None, KafkaError(f"{self.path}: bad Produce response: {exc}")
                self.in_flight.popleft()
                self.slots.release()
                self.metrics.request_answered()
                try:
                    if error is not None:
                        self._handle_failure(index, batches, error)
                    else:
                        located = await self._locate_written(batches, response)
                        self._handle_response(index, batches, response, located)
                except Exception:
                    log.exception("%s response handling failed", self.path)
            elif kind == "held":
                self.in_flight.popleft()
                for batch, cause in head[2]:
                    self.retry_message(batch, cause)
            elif kind == "fin":
                self.in_flight.popleft()
                _, index, batch = head
                self.muter.chased((batch.topic, batch.partition), index)
                self.retry_message(batch, KafkaError("chaser"))
            else:  # shutdown: every response before it is handled
                self.in_flight.popleft()
                _, _, done = head
                try:
                    self._flush_calls()
                    if self.calls:
                        await asyncio.gather(*self.calls, return_exceptions=True)
                    self.calls = []
                    await self.conn.close()
                    await self.lookup_conn.close()
                    await self.ctx.retry_handler.unref.remote()
                except Exception:
                    log.exception("%s shutdown failed", self.path)
                if not done.done():
                    done.set_result(None)
                continue
            if not self._next_answered():  # answers that came together are reported together
                self._flush_calls()
            self.handled.set()

    def _next_answered(self) -> bool:
        """Whether the next request in flight has its response already."""
        return bool(self.in_flight) and self.in_flight[0][0] == "request" and self.in_flight[0][2].done()

    async def _locate_written(self, batches: list[MessageBatch], response: Any) -> dict[Partition, int | Exception]:
        """For each batch the broker took without giving its offset (no error or
        DUPLICATE_SEQUENCE_NUMBER, base offset -1): its offset, read from the partition's log on
        `lookup_conn` from the last offset known below it (else the log's start), or why not.

        Bounded: LOOKUP_MAX_BYTES read, LOOKUP_ATTEMPTS requests lost, each within request.timeout.ms."""
        parts = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        located: dict[Partition, int | Exception] = {}
        for batch in batches:
            tp = (batch.topic, batch.partition)
            part = parts.get(tp)
            if part is None or part.error_code not in (0, DUPLICATE_SEQUENCE_NUMBER) or part.base_offset >= 0:
                continue
            answer = code_for(part.error_code).name
            what = f"{self.path}: produce to {batch.topic}/{batch.partition}: {answer} with base offset -1: " \
                   "written, offset unknown"
            if batch.producer_id < 0:
                located[tp] = UnknownOffsetError(f"{what} (no producer id to find it by)")
                continue
            pid, epoch, sequence, after = self.acked.get(tp, (-1, -1, -1, 0))
            start = after if (pid, epoch) == (batch.producer_id, batch.producer_epoch) and sequence < batch.base_sequence \
                else 0
            cause: Exception | None = None
            for _ in range(LOOKUP_ATTEMPTS):
                try:
                    if not self.lookup_conn.connected:
                        await self.lookup_conn.connect()
                    found = await find_batch_offset(
                        self.lookup_conn, self.ctx.config, batch.topic, batch.partition, start,
                        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence, max_bytes=LOOKUP_MAX_BYTES)
                except Exception as exc:  # lost with its connection (retriable), or a broker's answer
                    cause = exc
                    if isinstance(exc, KafkaError) and exc.retriable:
                        continue
                    break
                located[tp] = found if found is not None else UnknownOffsetError(
                    f"{what} (batch of producer {batch.producer_id} epoch {batch.producer_epoch} sequence "
                    f"{batch.base_sequence} not found in the log from offset {start})")
                break
            if tp not in located:
                located[tp] = UnknownOffsetError(f"{what} (looking it up failed: {cause})")
            log.info("%s %s/%d: %s without an offset; looked up: %s", self.path, *tp, answer, located[tp])
        return located

    def _handle_response(self, index: int, batches: list[MessageBatch], response: Any,
                         located: dict[Partition, int | Exception]) -> None:
        parts = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        for batch in batches:
            tp = (batch.topic, batch.partition)
            part = parts.get(tp)
            code = part.error_code if part is not None else 3
            if code == 0 or code == DUPLICATE_SEQUENCE_NUMBER:
                offset = located.get(tp, part.base_offset)
                if isinstance(offset, Exception):
                    self._report_error(batch, offset)
                else:
                    self._succeed_at(batch, offset, part.get("log_append_time_ms", -1))
                continue
            error = BrokerError(code, f"{self.path}: produce to {batch.topic}/{batch.partition}",
                                part.get("error_message") if part is not None else None)
            self.metrics.broker_error(error)
            if code == MESSAGE_TOO_LARGE and len(batch) > 1:
                # over the broker's message.max.bytes, so not written: as the Java producer, cut in
                # two and send each half on its own, in order (the halves' sequences follow on);
                # a cut is not a retry. A single record that is too large fails with the cause.
                self.muter.mute(tp, error, index)
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
                self.muter.mute(tp, error, index)
                self.retry_message(batch, error)
            else:
                self._report_error(batch, error)

    def _handle_failure(self, index: int, batches: list[MessageBatch], error: Exception) -> None:
        """The request got no answer (dropped connection, timeout): every batch in it is retried."""
        log.info("%s request %d failed: %s", self.path, index, error)
        for batch in batches:
            self.muter.mute((batch.topic, batch.partition), error, index)
            self.retry_message(batch, error)

    # -- accounting: every message ends here, in the results or back in the retry loop -------

    def retry_message(self, batch: MessageBatch, cause: Exception, counted: bool = True) -> None:
        """Sarama's retryMessage: give up at `retries` (unless the retry is a cut batch's half, not
        `counted`) or past delivery.timeout.ms, else count up and hand to the retry handler."""
        if not batch.is_control:
            if counted and batch.retries >= self.max_retries:
                self._report_error(batch, cause)
                return
            if batch.created_ms and time.time() * 1000 - batch.created_ms > self.delivery_timeout_ms:
                self._report_error(batch, DeliveryTimeoutError(
                    f"not delivered within delivery.timeout.ms={self.delivery_timeout_ms} "
                    f"after {batch.retries} retries; last error: {cause}"))
                return
        self.metrics.retried(batch)
        batch.retries += 1
        self._retry_out.append(batch)

    def _succeed_at(self, batch: MessageBatch, offset: int, append_time: int = -1) -> None:
        """The batch is written at `offset` (-1 only with acks=0, where nothing tells it)."""
        if offset >= 0 and batch.producer_id >= 0:
            self.acked[(batch.topic, batch.partition)] = (batch.producer_id, batch.producer_epoch,
                                                          batch.base_sequence, offset + len(batch))
        self._results_out.append((batch.ids, batch.topic, batch.partition, offset, append_time, None))
        self.metrics.acked(batch)
        self._note_span(batch)

    def _report_error(self, batch: MessageBatch, error: Exception) -> None:
        if len(batch.ids):
            self._results_out.append((batch.ids, batch.topic, batch.partition, -1, -1, error))
            self._note_span(batch)

    def _note_span(self, batch: MessageBatch) -> None:
        span = batch.span()
        if span is not None:
            self._spans_out.append((batch.topic, batch.partition, *span))

    def _flush_calls(self) -> None:
        if self._retry_out:
            self.calls.append(self.ctx.retry_handler.retry.remote(self._retry_out))
            self._retry_out = []
        if self._results_out:
            self.calls.append(self.ctx.results.report.remote(self._results_out, self._spans_out))
            self._results_out, self._spans_out = [], []
        if len(self.calls) > 64:
            import ray

            _, self.calls = ray.wait(self.calls, num_returns=len(self.calls), timeout=0)
