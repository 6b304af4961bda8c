"""Flusher: one per broker, inside its BrokerWorker (actors/broker_worker.py), not an actor of
its own. Builds Produce requests from the sets the worker's `AggregatorState` makes, keeps up to
`max.in.flight.requests.per.connection` of them on the broker connection, and handles the
responses in the order the requests were sent.

Called by its BrokerWorker only, on the worker's event loop (`submit(entries)`, in the order the
sets were made; the future it returns is done once the set's requests are on the wire). Puts
successes and final errors into its worker's `Mailbox` (a plain call: the driver polls the
worker), and calls the RetryHandler (messages to retry; each broker holds a reference there, in its
worker's name, released here after the broker's last response); in a transactional
producer, the TransactionOwner too (`add_partitions` for each set's partitions, asked as the set
comes in and awaited before its first Produce, as Java's Sender adds a partition before it
drains it).

The decisions live in `FlusherState` (actors/flusher_state.py, no Ray, no asyncio): the
in-flight ledger (requests, held batches, chasers, the shutdown mark, each a typed entry), the
produce-response table (delivered, retried, RESET, halved, failed), the `PartitionMuter` that
keeps one batch in flight per partition, and where a look-up for a batch written without its
offset starts. This class owns the connections: it encodes and sends the requests, awaits their
answers in order, looks up offsets the broker left out (`_locate_written`, on a second
connection), and hands what the state decided to the RetryHandler and the worker's mailbox.
Each of its two connections is (re)opened under its own `ReconnectBackoff` (wire/cluster.py, the
one the cluster's connections use): `reconnect.backoff.ms` after the last attempt, doubling up
to `reconnect.backoff.max.ms`, so batches retried while the broker is down do not hammer it.

With compression, the `AggregatorState` sizes batches by an estimate of each topic's compression
ratio; after each set it sends, the Flusher hands the ratios it measured to `observe` (the
state's `observe`, a plain call in the same process) to correct it. A batch whose first
compression comes out larger than `max.request.size` (the estimate was too hopeful) is cut into
pieces that fit, sent in consecutive requests; with idempotence the pieces keep consecutive
sequence numbers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import ray

from ..wire import messages
from ..wire.cluster import ReconnectBackoff
from ..wire.compression import Compression
from ..wire.connection import BrokerConnection, security_from_config
from ..wire.errors import KafkaError, UnknownOffsetError, code_for
from ..wire.fetch import find_batch_offset
from ..wire.record_encoding import encode_record_batch_parts, prepare_columnar
from .batch import FIN, SHUTDOWN, SYN, Control, MessageBatch, ProduceSet
from .calls import pipeline_error
from .flusher_state import (
    Chaser,
    FlusherState,
    HeldBatches,
    InFlightRequest,
    Partition,
    PartitionMuter,
    ProduceAnswer,
    ShutdownMark,
)
from .metrics import FlusherMetrics
from .producer_results import Mailbox
from .shared_column import read_fetched, shared_refs

log = logging.getLogger("raykafka.producer.flusher")

LOOKUP_MAX_BYTES = 64 << 20  # read at most this much of a partition's log to find a written batch
LOOKUP_ATTEMPTS = 3  # look-up requests lost with their connection before giving up
PIECE_FILL_PERCENT = 90  # an over-size compressed batch is cut into pieces aimed at this share of max.request.size
CALLS_PRUNE_AT = 64  # retry calls held before the finished ones are dropped

__all__ = ["Flusher", "PartitionMuter"]


class Flusher:
    def __init__(self, ctx: Any, node_id: int, host: str, port: int,
                 observe: Callable[[dict[str, float]], None] | None = None, mailbox: Mailbox | None = None,
                 worker: str | None = None):
        """`observe`: told the compression ratios measured, after each set is sent; `mailbox`:
        where the outcomes go (its worker's; by default one of its own); `worker`: the name of
        the BrokerWorker hosting it, told to the RetryHandler with its reference."""
        config = ctx.config
        self.ctx = ctx
        self.worker = worker
        self.node_id = node_id
        self.path = f"producer/broker/{node_id}"
        ssl_context, sasl = security_from_config(config)
        self.conn, self.lookup_conn = (
            BrokerConnection(host, port, node_id=node_id, client_id=config["client.id"],
                             request_timeout_ms=config["request.timeout.ms"],
                             connect_timeout_ms=config["socket.connection.setup.timeout.ms"],
                             ssl_context=ssl_context, sasl=sasl) for _ in range(2))  # the second: `_locate_written`
        self.backoffs = {self.conn: ReconnectBackoff.from_config(config),
                         self.lookup_conn: ReconnectBackoff.from_config(config)}
        self.acks = config["acks"]
        self.timeout_ms = config["request.timeout.ms"]
        self.codec = int(Compression.from_name(config["compression.type"]))
        self.max_in_flight = config["max.in.flight.requests.per.connection"]
        self.max_request_size = config["max.request.size"]
        self.ratios: dict[str, float] = {}  # topic -> compressed bytes per record byte, measured since the last set
        self.observe = observe
        self.inbox: deque[tuple[list, asyncio.Future, Any]] = deque()  # sets not taken by the sender yet
        self.metrics = FlusherMetrics(ctx.prefix.rstrip("/"), node_id)
        self.transactional_id = config["transactional.id"]  # with it, every batch is in a transaction
        self.state = FlusherState(self.path, max_retries=config["retries"],
                                  delivery_timeout_ms=config["delivery.timeout.ms"], observer=self.metrics,
                                  transactional=self.transactional_id is not None)
        self.mailbox = mailbox if mailbox is not None else Mailbox()
        self.request_index = 0
        self.calls: list[Any] = []  # refs of calls to the retry handler
        self._started = False
        if getattr(ctx, "warm_up", True):  # a `PipelineContext`'s, else (a stand-in's context) warmed up
            prepare_columnar()  # at start-up, not on the first large batch

    def metrics_snapshot(self) -> dict[str, Any]:
        return self.metrics.stats.snapshot()

    def submit(self, entries: list) -> asyncio.Future:
        """Queue a set of entries (`aggregator.ProduceSet` or `aggregator.Control`), behind those
        submitted before; the future is done once its requests are on the wire (for a SHUTDOWN,
        once every response before it is handled and the connections are closed)."""
        if not self._started:
            self._start()
        done = asyncio.get_running_loop().create_future()
        # in a transaction, the partitions are added while earlier sets are still being sent
        adding = self._add_partitions([b for e in entries if isinstance(e, ProduceSet) for b in e.batches])
        self.inbox.append((entries, done, adding))
        self.new_work.set()
        return done

    def _start(self) -> None:
        self._started = True
        self.new_work = asyncio.Event()
        self.responses = asyncio.Event()
        self.handled = asyncio.Event()  # set each time the receiver is done with an entry
        self.slots = asyncio.Semaphore(self.max_in_flight)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._sender()), loop.create_task(self._receiver())]

    # -- sending, in the order the sets were submitted ------------------------------

    async def _sender(self) -> None:
        while True:
            while not self.inbox:
                self.new_work.clear()
                await self.new_work.wait()
            entries, done, adding = self.inbox.popleft()
            try:
                for entry in entries:
                    if isinstance(entry, Control):
                        self._control(entry.batch, done)
                    else:
                        await self._send(entry.batches, adding)
            except Exception as exc:  # a bug: fail loudly to the worker, keep serving
                log.exception("%s sending failed", self.path)
                if not done.done():
                    done.set_exception(exc)
            if not done.done() and not any(isinstance(e, Control) and e.batch.flags & SHUTDOWN for e in entries):
                done.set_result(None)
            self._observe_ratios()
            self._flush_calls()

    def _observe_ratios(self) -> None:
        """The compression ratios measured while the set was encoded, to the worker's
        `AggregatorState` (which sizes the next batches by them)."""
        if self.ratios:
            ratios, self.ratios = self.ratios, {}
            if self.observe is not None:
                self.observe(ratios)

    def _control(self, batch: MessageBatch, done: asyncio.Future) -> None:
        tp = (batch.topic, batch.partition)
        if batch.flags & SYN:
            self.state.muter.open(tp)
        elif batch.flags & FIN:
            self.state.in_flight.append(Chaser(self.request_index, batch))
            self.responses.set()
        elif batch.flags & SHUTDOWN:
            self.state.in_flight.append(ShutdownMark(self.request_index, done))
            self.responses.set()

    async def _send(self, batches: list[MessageBatch], adding: Any = None) -> None:
        """`adding`: in a transaction, the TransactionOwner's call adding the batches' partitions,
        awaited before the first Produce."""
        if not self.conn.connected:
            # the connection died with requests on it: learn their fate (and flag their partitions)
            # before a new connection carries later batches ahead of them
            while self.state.requests_in_flight():
                self.handled.clear()
                await self.handled.wait()
        try:
            values = await self._values(batches)
        except Exception as exc:  # the values are gone from the object store (their owner died)
            for batch in batches:
                self.state.report_error(batch, KafkaError(f"{self.path}: the batch's values could not be read: {exc}"))
            return
        rounds: list[list[tuple[MessageBatch, tuple]]] = [[]]
        for batch, column in zip(batches, values, strict=True):
            for i, piece in enumerate(self._encode(batch, column)):  # a cut batch's pieces: one per request
                if i == len(rounds):
                    rounds.append([])
                rounds[i].append(piece)
        if adding is not None and not await self._added(adding, batches):
            return
        for encoded in rounds:
            await self._send_request(encoded)

    def _add_partitions(self, batches: list[MessageBatch]) -> Any:
        """In a transactional producer: ask the TransactionOwner to add the batches' partitions to
        the transaction (AddPartitionsToTxn; one added already costs no request), as Java's Sender
        does before it drains a partition. The call's ref, awaited before the first Produce; asked
        as the set is submitted, so that a set submitted behind others (one the worker's `add`
        completed) has its answer by its turn; a set that lingered is submitted only once the
        wire is free for it (`BrokerProducer._wire_free`), so it waits for the answer, once per
        partition and transaction."""
        if self.ctx.transactions is None or not batches:
            return None
        return self.ctx.transactions.add_partitions.remote(sorted({(b.topic, b.partition) for b in batches}))

    async def _added(self, adding: Any, batches: list[MessageBatch]) -> bool:
        """The partitions are in the transaction; else the batches fail with why not (the
        transaction's abortable error, or the fatal one, e.g. `ProducerFencedError`)."""
        try:
            await adding
        except Exception as exc:
            error = pipeline_error(exc)
            error = getattr(error, "cause", None) or error  # the error itself, not Ray's wrapper
            log.info("%s %d batch(es) not added to the transaction: %s", self.path, len(batches), error)
            for batch in batches:
                self.state.report_error(batch, error)
            return False
        return True

    async def _send_request(self, encoded: list[tuple[MessageBatch, tuple]]) -> None:
        """One Produce request of encoded record batches (at most one per partition), less those
        of muted partitions, which are retried behind the requests already in flight."""
        await self.slots.acquire()
        index = self.request_index
        self.request_index += 1
        try:
            await self._connected(self.conn)
            muter = self.state.muter
            held = muter.hold(batch for batch, _ in encoded)  # asked now: every answer before is in
            if held:
                self.state.in_flight.append(HeldBatches(index, held))
                self.responses.set()
                encoded = [(batch, records) for batch, records in encoded if (batch.topic, batch.partition)
                           not in muter]
                if not encoded:
                    self.slots.release()
                    return
            ready = [batch for batch, _ in encoded]
            body = self._request_body(encoded)
            future = self.conn.send_nowait(messages.PRODUCE, body, expect_response=self.acks != 0)
        except KafkaError as exc:  # not sent: retried behind the requests already in flight
            self.slots.release()
            self.state.in_flight.append(self.state.not_sent(index, [batch for batch, _ in encoded], exc))
            self.responses.set()
            return
        if future is None:  # acks=0: nothing will tell us more
            self.slots.release()
            for batch in ready:
                self.state.succeed_at(batch, -1)
            return
        self.state.in_flight.append(InFlightRequest(index, future, ready))
        self.metrics.request_sent(encoded)
        self.responses.set()

    async def _connected(self, conn: BrokerConnection) -> None:
        """`conn` open: reopened, if it is not, once its reconnect backoff allows."""
        if not conn.connected:
            await self.backoffs[conn].pace(self.path)
            await conn.connect()

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
        """The batch as one record batch; or, when compression did worse than the AggregatorState
        estimated and it is larger than max.request.size, cut into pieces that each fit."""
        records = encode_record_batch_parts(
            column, b.keys, b.timestamps, b.headers, compression=self.codec,
            producer_id=b.producer_id, producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
            is_transactional=self.transactional_id is not None)
        if not self.codec:
            return [(b, records)]
        size = sum(len(part) for part in records)
        if b.nbytes:
            self.ratios[b.topic] = max(self.ratios.get(b.topic, 0.0), size / b.nbytes)
        n = len(b)
        if size <= self.max_request_size or n == 1 or b.retries:  # a retry goes as it went before
            return [(b, records)]
        step = -(-n // -(-size // (self.max_request_size * PIECE_FILL_PERCENT // 100)))
        log.info("%s %s/%d: %d records compressed to %d bytes, over max.request.size: sent in pieces of %d",
                 self.path, b.topic, b.partition, n, size, step)
        return [piece for lo in range(0, n, step)
                for piece in self._encode(b.slice(lo, min(n, lo + step)), column[lo:min(n, lo + step)])]

    def _request_body(self, encoded: list[tuple[MessageBatch, tuple]]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for b, records in encoded:
            topics.setdefault(b.topic, []).append({"index": b.partition, "records": records})
        return {"transactional_id": self.transactional_id, "acks": self.acks, "timeout_ms": self.timeout_ms,
                "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]}

    # -- responses, in request order ------------------------------------------------

    async def _receiver(self) -> None:
        state = self.state
        while True:
            while not state.in_flight:
                self.responses.clear()
                await self.responses.wait()
            head = state.in_flight[0]
            if isinstance(head, InFlightRequest):
                try:
                    response = await self.conn.wait(head.future, messages.PRODUCE)
                    error = None
                except KafkaError as exc:
                    response, error = None, exc
                except Exception as exc:  # decoding trouble: the batch's fate is unknown, retry it
                    response, error = None, KafkaError(f"{self.path}: bad Produce response: {exc}")
                state.in_flight.popleft()
                self.slots.release()
                self.metrics.request_answered()
                try:
                    if error is not None:
                        state.handle_failure(head.index, head.batches, error)
                    else:
                        answers = produce_answers(response)
                        located = await self._locate_written(head.batches, answers)
                        state.handle_response(head.index, head.batches, answers, located)
                except Exception:
                    log.exception("%s response handling failed", self.path)
            elif isinstance(head, HeldBatches):
                state.in_flight.popleft()
                state.retry_held(head)
            elif isinstance(head, Chaser):
                state.in_flight.popleft()
                state.chaser_back(head)
            else:  # ShutdownMark: every response before it is handled
                state.in_flight.popleft()
                try:
                    self._flush_calls()
                    if self.calls:
                        await asyncio.gather(*self.calls, return_exceptions=True)
                    self.calls = []
                    await self.conn.close()
                    await self.lookup_conn.close()
                    await self.ctx.retry_handler.drop_retry_writer.remote(self.worker)
                except Exception:
                    log.exception("%s shutdown failed", self.path)
                if not head.done.done():
                    head.done.set_result(None)
                continue
            if not state.next_answered():  # answers that came together are reported together
                self._flush_calls()
            self.handled.set()

    async def _locate_written(self, batches: list[MessageBatch],
                              answers: dict[Partition, ProduceAnswer]) -> dict[Partition, int | Exception]:
        """For each batch the broker took without giving its offset (no error or
        DUPLICATE_SEQUENCE_NUMBER, base offset -1): its offset, read from the partition's log on
        `lookup_conn` from the last offset known below it (else the log's start), or why not.
        Not found past that offset, it is looked for again from the log's start: a broker that
        lost batches it had acknowledged (tansu killed, a Kafka log truncated) writes the next
        ones at lower offsets than those answered before, so the offset known is only a guess.

        Bounded: LOOKUP_MAX_BYTES read a scan, two scans (from the guess, then the start),
        LOOKUP_ATTEMPTS requests lost, each scan within request.timeout.ms."""
        located: dict[Partition, int | Exception] = {}
        for batch in batches:
            tp = (batch.topic, batch.partition)
            part = answers.get(tp)
            if not self.state.needs_lookup(part):
                continue
            answer = code_for(part.error_code).name
            what = f"{self.path}: produce to {batch.topic}/{batch.partition}: {answer} with base offset -1: " \
                   "written, offset unknown"
            if batch.producer_id < 0:
                located[tp] = UnknownOffsetError(f"{what} (no producer id to find it by)")
                continue
            start = self.state.lookup_start(batch)
            cause: Exception | None = None
            for _ in range(LOOKUP_ATTEMPTS):
                try:
                    found = await self._find(batch, start)
                    if found is None and start > 0:  # past the guess: from the log's start
                        log.info("%s %s/%d: sequence %d not found from offset %d; reading from the log's start",
                                 self.path, *tp, batch.base_sequence, start)
                        start = 0
                        found = await self._find(batch, start)
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

    async def _find(self, batch: MessageBatch, start: int) -> int | None:
        """`batch`'s offset in its partition's log, read from `start`; None if it is not there."""
        await self._connected(self.lookup_conn)
        return await find_batch_offset(self.lookup_conn, self.ctx.config, batch.topic, batch.partition, start,
                                       producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                                       base_sequence=batch.base_sequence, max_bytes=LOOKUP_MAX_BYTES)

    def _flush_calls(self) -> None:
        retries = self.state.take_retries()
        if retries:
            call = self.ctx.retry_handler.retry.remote(retries)
            if call is not None:  # None: taken at once (the in-process pipeline's retry queue)
                self.calls.append(call)
        results, spans = self.state.take_results()
        if results:
            self.mailbox.report(results, spans)
        if len(self.calls) > CALLS_PRUNE_AT:
            _, self.calls = ray.wait(self.calls, num_returns=len(self.calls), timeout=0)


def produce_answers(response: Any) -> dict[Partition, ProduceAnswer]:
    """A Produce response's partitions, each as a `ProduceAnswer`."""
    return {(t.name, p.index): ProduceAnswer(p.error_code, p.base_offset, p.get("log_append_time_ms", -1),
                                             p.get("error_message"))
            for t in response.responses for p in t.partition_responses}
