"""`Producer`: what a driver program uses to send messages through the producer actors.

    with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = producer.send("events", b"value", key=b"k")
        print(future.result(10))          # RecordMetadata(topic, partition, offset, timestamp)
        producer.send_batch("events", values, keys=keys).result()   # BatchResult

`send` gathers messages on the caller's side: a background thread hands them on in batches, by
size or after `linger.ms`, so no actor call is made per message; a topic's first batches to the
TopicDispatcher, the rest straight to the topic's PartitionDispatcher (`topic_routes`).
`send_batch` takes lists or a pyarrow Table/RecordBatch with Spark's Kafka sink columns and costs
no Python call per record here. Every message ends exactly once: its future (or its place in a
BatchResult) gets the offset, or an error naming the cause.

Bytes sent but not yet resolved are bounded by `buffer.memory`: `send` blocks up to
`max.block.ms` for room, then raises `BufferExhaustedError`. `close()` delivers everything
already accepted, then shuts the actors down in Sarama's order (dispatchers, then each broker's
worker once its last writer has gone, then the retry handler) and leaves none
of this producer's actors alive; with one of them dead it still ends, in bounded time, and what
that actor held fails naming it.

What a caller does with a future cannot stop the producer: a cancelled future is skipped (the
message goes all the same, and `on_delivery`, `successes()` and `errors()` still hear of it),
and a callback that raises is logged. An `on_delivery` callback runs on a thread that delivers
reports, which `close()` and `flush()` wait for: there, as in Java, `close()` is `close(0)` and
`flush()` raises `FlushInCallbackError`. A wrong argument is refused where it is given, with an
error naming it (`ConfigError` for a config key).

This module is the facade: it checks what it is given, gathers it, and wires the rooms beside
it, each on one `ProducerState` (driver/producer_state.py: the lock, conditions and flags they
share): `producer_sender` (the sender thread), `producer_poller` (the results thread, which
long-polls the RetryHandler and every broker worker: `ReportSources`), `producer_settlement`
(outcomes ended, futures set, reports delivered), `producer_healer` (the pipeline rebuilt after
an actor died) and `producer_close` (close, in order and bounded). Beside them:
`producer_input` (what `send`/`send_batch` accept, normalised), `accumulator` (the caller-side
buffers), `producer_ledger` (every message accepted and not yet ended, and the buffer.memory it
holds), `message_futures` (the futures' shared-Condition fast path), `producer_pipeline` (the
actors, started and stopped in order), `topic_routes` (where the sender hands each topic's
batches) and `producer_watchdog` (every message's life bounded, through the watch interface
below). The state's one lock guards the accumulator and the ledger.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..actors.batch import MAY_BE_WRITTEN, RECORD_OVERHEAD, MessageBatch
from ..actors.metrics import ProducerMetrics
from ..actors.producer_results import Outcome
from ..wire.config import parse_config
from ..wire.errors import (
    BufferExhaustedError,
    ConfigError,
    FlushInCallbackError,
    KafkaError,
    MessageTooLargeError,
    OutcomeUnknownError,
    PipelineError,
    ProducerClosedError,
    TransactionStateError,
)
from ..wire.serde import get_serializer, serialize_many, serialize_one
from .accumulator import Accumulator, shared
from .message_futures import MessageFuture
from .producer_close import Closer
from .producer_healer import Healer
from .producer_input import (
    MAX_PARTITION,
    batch_columns,
    check_lengths,
    oversized,
    packed,
    partition_column,
    raw_arrow,
    record_headers,
    record_sizes,
    slice_bounds,
    timestamp_column,
    timestamp_ms,
    too_large_error,
    topic_column,
)
from .producer_ledger import BatchResult, BatchState, RecordMetadata
from .producer_log_match import Heal
from .producer_pipeline import CLOSE_MIN, ProducerPipeline
from .producer_poller import Poller
from .producer_sender import Sender
from .producer_settlement import Settlement
from .producer_state import ProducerState
from .producer_transactions import ProducerTransactions
from .producer_watchdog import ProducerWatchdog
from .ray_runtime import RaySession, ensure_ray, starts_no_ray
from .topic_routes import TopicRoutes

log = logging.getLogger("raykafka.producer")

__all__ = ["BatchResult", "Producer", "RecordMetadata"]

# a send_batch larger than buffer.memory / SLICES_IN_BUFFER goes in slices of that size, each
# waiting for room in turn, so a table of any size can be sent (as Java's producer blocks per record)
SLICES_IN_BUFFER = 4
# the time keys some thread of the producer waits on (threading.TIMEOUT_MAX bounds such a wait)
WAITED_ON = ("linger.ms", "max.block.ms", "retry.backoff.ms", "request.timeout.ms", "delivery.timeout.ms")


class Producer:
    """A Kafka producer whose pipeline runs as Ray actors (see `raykafka.actors`)."""

    def __init__(self, config: Mapping[str, Any], *, on_delivery: Callable[[RecordMetadata | None, Exception | None], None] | None = None,
                 return_successes: bool = False, return_errors: bool = False, name: str | None = None,
                 stats_cb: Callable[[dict], Any] | None = None):

        if not isinstance(config, Mapping):
            raise ConfigError(f"config: expected a mapping of Kafka property names to values, got {type(config).__name__}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable as on_delivery(metadata, error), not {type(on_delivery).__name__}")
        if name is not None and (type(name) is not str or not name):
            raise TypeError(f"name must be a non-empty str, not {name!r}")
        self.config = parse_config(config, role="producer")
        _check_waits(self.config)
        self.key_serializer = get_serializer(self.config["key.serializer"])
        self.value_serializer = get_serializer(self.config["value.serializer"])
        self.name = name or f"raykafka-producer-{uuid.uuid4().hex[:8]}"
        self.metrics = ProducerMetrics(self, stats_cb)  # figures for Ray's metrics, and stats_cb
        self.linger = self.config["linger.ms"] / 1000
        self.max_request_size = self.config["max.request.size"]
        self.buffer_memory = self.config["buffer.memory"]
        self.max_block = self.config["max.block.ms"] / 1000

        self._state = ProducerState()  # the lock, conditions and flags the threads below share
        self._bytes_values = self.config["value.serializer"] == "bytes"
        self._bytes_keys = self.config["key.serializer"] == "bytes"
        self._raw_arrow = raw_arrow(self.config)
        self._acc = Accumulator()  # what send gathered, and the batches ready to hand on (the state's lock guards it)
        # healing: without transactional.id a pipeline an actor died in is rebuilt, and what it
        # held sent again (`Healer`); the batches handed on are kept until their messages end
        self.heals_on_death = self.config["transactional.id"] is None  # a transactional one aborts instead
        # the rooms, each on the shared state: outcomes ended and reported; the sender thread;
        # the results thread; the healer (they call back into the Producer only through the
        # bound methods given here)
        self._settlement = Settlement(self._state, self.name, self.metrics, self.heals_on_death, on_delivery,
                                      return_successes, return_errors, self.request_heal,
                                      lambda: self._transactions)

        ensure_ray()
        self.ray_session = RaySession()  # to tell when Ray is shut down under it
        self._sending = Sender(self._state, self._acc, self._settlement, self.linger, self.heals_on_death,
                               self.metrics, self.ray_session)
        self._results = Poller(self._state, self._settlement, self.name, self.ray_session, self.request_heal,
                               self.ray_gone)
        self._healer = Healer(self._state, self.config, self.name, self.heals_on_death, self._settlement,
                              self._sending.kept, self._start_pipeline, lambda: self._watchdog.healed(),
                              self._fail_unresolved)
        self._start_pipeline(ProducerPipeline(self.config, self.name))  # raises the cause if it cannot start
        self._transactions = (ProducerTransactions(self.config, self.ctx.transactions, self._topic_dispatcher, self.flush)
                              if self.config["transactional.id"] is not None else None)
        self._sender = threading.Thread(target=starts_no_ray(self._sending.run), name=f"{self.name}-sender", daemon=True)
        self._poller = threading.Thread(target=starts_no_ray(self._results.run), name=f"{self.name}-results", daemon=True)
        self._sender.start()
        self._poller.start()
        self._watchdog = ProducerWatchdog.watch(self)
        # close, made last: it stops the threads and the watchdog above
        self._closer = Closer(self._state, self._acc, self._settlement, self._healer, self._watchdog, self._sender,
                              self._poller, self.metrics, self.ray_session, self.heals_on_death, self.pending,
                              self.ray_gone, self._fail_unresolved, self._wait_resolved)
        self.metrics.start()

    def _start_pipeline(self, pipeline: ProducerPipeline) -> None:
        """Make `pipeline` the one in use (under the state's lock, but for the first)."""
        self._state.pipeline = pipeline
        self._state.torn_down = False  # a heal kills the old pipeline's actors before it starts the next
        self.ctx = pipeline.ctx
        self._topic_dispatcher = pipeline.topic_dispatcher
        self.producer_id, self.producer_epoch = pipeline.producer_id, pipeline.producer_epoch
        self._state.routes = TopicRoutes(self._topic_dispatcher, self.ctx.window, self._state.wake)

    @property
    def on_delivery(self) -> Callable[[RecordMetadata | None, Exception | None], None] | None:
        """The callback each message's outcome is given to (`Settlement.report`)."""
        return self._settlement.on_delivery

    @property
    def pipeline_prefix(self) -> str:
        """The name prefix of the actors of the pipeline in use (`name/` at first, `name~N/` after
        the N-th heal)."""
        return self._state.pipeline.name + "/"

    # -- sending -------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: int | None = None, timestamp: int | None = None) -> Future:
        """Queue one message; the future gives its `RecordMetadata` or raises why it failed."""
        if self._transactions is not None:  # within a transaction only, else TransactionStateError
            self._transactions.check_send()
        # the hot path: a few checks, one row appended under a plain lock
        v = value if type(value) is bytes and self._bytes_values else serialize_one(self.value_serializer, value, "value")
        k = key if key is None or (type(key) is bytes and self._bytes_keys) else serialize_one(self.key_serializer, key, "key")
        size = RECORD_OVERHEAD + (len(v) if v is not None else 0) + (len(k) if k is not None else 0)
        if headers is not None:
            headers = record_headers(headers)
            if headers:
                size += sum(len(hk) + (len(hv) if hv else 0) + 4 for hk, hv in headers)
        if partition is None:
            partition = -1
        elif type(partition) is not int:
            raise TypeError(f"partition must be an int or None, not {type(partition).__name__}")
        elif not 0 <= partition <= MAX_PARTITION:
            raise ValueError(f"partition must be between 0 and {MAX_PARTITION}, not {partition}")
        if type(topic) is not str or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        ts = int(time.time() * 1000) if timestamp is None else timestamp_ms(timestamp)
        state = self._state
        future = MessageFuture(state.futures_condition)
        if size > self.max_request_size:
            future.set_exception(MessageTooLargeError(
                f"message of {size} bytes is larger than max.request.size={self.max_request_size}"))
            if self._transactions is not None:  # as Java: the transaction cannot commit without it
                self._transactions.note_failure(future.exception())
            return future
        ledger = state.ledger
        with state.lock:
            if state.closed or ledger.unresolved_bytes + size > self.buffer_memory:
                self._reserve(size, 1)  # waits for room, or raises
            else:
                ledger.reserve(size)
            mid = ledger.add(future, topic, ts, size)
            if self._acc.add(topic, (mid, v, k, ts, headers, partition), size):
                state.cond.notify_all()
        return future

    def send_batch(self, topic: str | None, values: Any = None, keys: Any = None, headers: Any = None,
                   partitions: Any = None, timestamps: Any = None) -> Future:
        """Queue many messages at once; the future gives a `BatchResult`.

        `values` is a list, or a pyarrow Table/RecordBatch with Spark's Kafka sink columns
        (`value` required; `key`, `topic`, `partition`, `headers`, and `timestamp`, optional;
        any other column is refused, as the sinks refuse it: `check_write_columns`). With a `topic`
        column, `topic` may be None and each row goes to its own topic. A batch of more than a
        quarter of `buffer.memory` is taken in slices of that size, each waiting up to
        `max.block.ms` for room; if one cannot get it, it and the rest fail with that cause.
        """
        if self._transactions is not None:  # within a transaction only, else TransactionStateError
            self._transactions.check_send()
        columns = batch_columns(values, keys, headers, partitions, timestamps, self._raw_arrow)
        values, keys, headers, partitions, timestamps, topics = columns
        n = len(values)
        if topics is None and (not isinstance(topic, str) or not topic):
            raise TypeError(f"topic must be a non-empty str (or give a topic column), not {topic!r}")
        values = packed(serialize_many(self.value_serializer, values, "values"))
        if keys is not None:
            keys = packed(serialize_many(self.key_serializer, keys, "keys"))
        check_lengths(n, keys, headers, partitions, timestamps)
        sizes = record_sizes(values, keys, headers)
        total = int(sizes.sum())
        future: Future = Future()
        if n == 0:
            future.set_result(BatchResult(0, 0, np.zeros(0, np.int32), np.zeros(0, np.int64), []))
            return future
        too_large = oversized(sizes, self.max_request_size)
        values = shared(values)
        now_ms = int(time.time() * 1000)
        ts: int | list[int] = now_ms if timestamps is None else timestamp_column(timestamps, now_ms)
        explicit = None if partitions is None else partition_column(partitions)
        topic_arr = None if topics is None else topic_column(topics)
        state: BatchState | None = None
        bounds = slice_bounds(sizes, max(1, self.buffer_memory // SLICES_IN_BUFFER))
        for lo, hi in bounds:
            with self._state.cond:
                try:
                    self._reserve(int(sizes[lo:hi].sum()), hi - lo)
                except (BufferExhaustedError, ProducerClosedError) as exc:
                    if state is None:  # nothing accepted: the caller's mistake or a full buffer, said at once
                        raise
                    self._state.ledger.fail_in_batch(state, np.arange(lo, n), exc, sizes, reserved=False)
                    if self._transactions is not None:  # as Java: the transaction cannot commit without them
                        self._transactions.note_failure(exc)
                    break
                if state is None:
                    state = self._state.ledger.add_batch(n, future, total)
                    start = state.start
                    whole = MessageBatch(topic=topic or "", ids=range(start, start + n), values=values, keys=keys,
                                         timestamps=ts, headers=headers, partitions=explicit, created_ms=now_ms,
                                         nbytes=total)
                self._acc.seal()  # what send gathered before goes first
                self._acc.ready.extend(self._slice(whole, lo, hi, too_large, topic_arr, state, sizes))
                self._state.cond.notify_all()
        self._settlement.complete_finished()
        return future

    def _slice(self, whole: MessageBatch, lo: int, hi: int, too_large: np.ndarray, topic_arr: np.ndarray | None,
               state: BatchState, sizes: np.ndarray) -> list[MessageBatch]:
        """Records `lo:hi` of a `send_batch` as batches to hand on (lock held): those larger than
        max.request.size fail here alone, the rest go one batch per topic."""
        batch = whole.slice(lo, hi) if (lo, hi) != (0, len(whole)) else whole
        keep = np.arange(hi - lo)
        bad = np.flatnonzero(too_large[lo:hi])
        if len(bad):
            error = too_large_error(self.max_request_size)
            self._state.ledger.fail_in_batch(state, lo + bad, error, sizes)
            if self._transactions is not None:  # as Java: the transaction cannot commit without them
                self._transactions.note_failure(error)
            keep = np.flatnonzero(~too_large[lo:hi])
            if not len(keep):
                return []
            batch = batch.take(keep.tolist())
        if topic_arr is None:
            return [batch]
        names = topic_arr[lo:hi][keep]
        parts = []
        for name in dict.fromkeys(names.tolist()):
            idx = np.flatnonzero(names == name).tolist()
            part = batch.take(idx)
            part.topic = name
            parts.append(part)
        return parts

    def _reserve(self, size: int, count: int) -> None:
        """Wait (lock held) for `size` bytes of buffer.memory, up to max.block.ms."""
        if self._state.closed:
            raise ProducerClosedError("send on a closed producer")
        if size > self.buffer_memory:
            raise BufferExhaustedError(f"{count} message(s) of {size} bytes cannot fit in buffer.memory={self.buffer_memory}")
        deadline = time.monotonic() + self.max_block
        ledger = self._state.ledger
        while ledger.unresolved_bytes + size > self.buffer_memory:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BufferExhaustedError(
                    f"waited max.block.ms={int(self.max_block * 1000)} for {size} bytes of buffer.memory="
                    f"{self.buffer_memory} ({ledger.unresolved_bytes} bytes sent and not yet acknowledged)")
            if not self._state.flush_now:  # hand over what is gathered; a sender already told needs no new wake-up
                self._state.flush_now = True  # (waking every waiter each time round would have two blocked
                self._state.cond.notify_all()  # send_batch calls wake each other in turn, a core's worth)
            self._state.cond.wait(left)
            self.metrics.blocked(left - (deadline - time.monotonic()))  # how long that wait took
            if self._state.closed:
                raise ProducerClosedError("send on a closed producer")
        ledger.reserve(size)

    # -- healing (driver/producer_healer.py) ---------------------------------------------

    def request_heal(self, cause: Any, seen_in: ProducerPipeline | None = None) -> None:
        """An actor of the pipeline died (seen by the watchdog, a failed call or a report, in
        pipeline `seen_in`): rebuild the pipeline on the healer thread, once for however many see
        it; nothing if `seen_in` was healed already (`Healer.request_heal`)."""
        self._healer.request_heal(cause, seen_in)

    @property
    def healed(self) -> int:
        """How many times the pipeline was rebuilt."""
        return self._healer.healed

    @property
    def heals_done(self) -> list[Heal]:
        """Each rebuild, with what it found and sent again."""
        return self._healer.heals_done

    @property
    def heal_failures(self) -> int:
        """Attempts that could not rebuild the pipeline (tried again after HEAL_RETRY)."""
        return self._healer.heal_failures

    # -- the async style: Sarama's Successes and Errors --------------------------------

    def successes(self, timeout: float | None = None) -> Iterator[RecordMetadata]:
        """Delivered messages as they are acknowledged (needs `return_successes=True`)."""
        return self._drain(self._settlement.successes, "return_successes", timeout)

    def errors(self, timeout: float | None = None) -> Iterator[Exception]:
        """Failures as they happen (needs `return_errors=True`)."""
        return self._drain(self._settlement.errors, "return_errors", timeout)

    def _drain(self, q: queue.Queue | None, flag: str, timeout: float | None) -> Iterator[Any]:
        if q is None:
            raise RuntimeError(f"construct the Producer with {flag}=True to iterate these")
        while True:
            try:
                yield q.get(timeout=timeout if timeout is not None else 0.1)
            except queue.Empty:
                if timeout is not None or self._state.closed:
                    return

    # -- transactions (with transactional.id; driver/producer_transactions.py) -------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Once, before the first transaction: the producer id and epoch of `transactional.id`
        (InitProducerId); an earlier producer with the same id is fenced, what it left open aborted."""
        self.producer_id, self.producer_epoch = self._transactional().init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._transactional().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Any, group_id: str, timeout: float | None = None,
                                    **group_member: Any) -> None:
        """Commit consumer group `group_id`'s `offsets` ({(topic, partition): next offset}) with
        the transaction (consume-transform-produce)."""
        self._transactional().send_offsets_to_transaction(offsets, group_id, timeout, **group_member)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Every message sent in the transaction acknowledged, then committed. Raises
        `TransactionAbortableError` if one failed (abort it), `TransactionFatalError` if the
        producer is fenced, `TransactionTimeoutError` (call again) if `timeout` ran out."""
        self._transactional().commit_transaction(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Let the transaction's messages end, then abort it. If an actor of the pipeline died (the
        transaction owner too), or a message of the transaction failed in the pipeline (its
        partition's sequence may have a gap: `ProducerTransactions.abort_transaction`), the
        pipeline is replaced, and the transactional.id initialized again on the new one (a new
        epoch, numbering from 0, which also aborts what the old epoch left open)."""
        transactions = self._transactional()
        failed: Exception | None = None
        try:
            failed = transactions.abort_transaction(timeout)
            broken: Exception | None = None
        except PipelineError as exc:
            broken = exc
        if broken is None:
            self._watchdog.scan_now()
            if self._watchdog.dead:
                broken = PipelineError(self._watchdog.dead_actors())
        if broken is None and failed is not None:
            broken = KafkaError(f"a message of the aborted transaction failed in the pipeline, so its "
                                f"partition's sequence may have a gap: {failed!r}")
        if broken is not None:
            self._renew_transactional(broken, timeout)

    def _renew_transactional(self, cause: Exception, timeout: float | None) -> None:
        """A new pipeline for a transactional producer whose old one broke (after its messages ended)."""
        old, t0 = self._state.pipeline, time.monotonic()
        log.warning("%s: replacing the transactional pipeline: %s", self.name, cause)
        old.kill_all(CLOSE_MIN)
        pipeline = ProducerPipeline(self.config, self._healer.next_name())
        with self._state.cond:
            self._start_pipeline(pipeline)
            self._transactions = ProducerTransactions(self.config, self.ctx.transactions, self._topic_dispatcher,
                                                      self.flush)
            self._state.cond.notify_all()
        self._watchdog.healed()
        self.producer_id, self.producer_epoch = self._transactions.init_transactions(timeout)
        self._healer.healed += 1  # a transactional producer's renewal counts as its heal (its Healer never heals)
        self._healer.heals_done.append(Heal(str(cause), time.monotonic() - t0, 0, 0, (old.producer_id, self.producer_id)))

    def _transactional(self) -> ProducerTransactions:
        if self._transactions is None:
            raise TransactionStateError("a transactional method of a producer without transactional.id")
        return self._transactions

    # -- flush and close -----------------------------------------------------------------

    def pending(self) -> int:
        """Messages sent and not yet resolved."""
        with self._state.cond:
            return len(self._state.ledger)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything gathered and wait until every message sent so far has ended.

        Returns how many are still unresolved (0 unless `timeout` ran out). From a delivery
        callback (`on_delivery`, or a done-callback of a future it returned) it raises
        `FlushInCallbackError`: it would wait for the callback's own thread."""
        if self._settlement.in_callback():
            raise FlushInCallbackError("flush() called from a delivery callback (on_delivery, or a future's "
                                       "done-callback) would wait forever for the "
                                       "reports that the callback's own thread delivers; flush from another thread")
        return self._wait_resolved(None if timeout is None else time.monotonic() + timeout)

    def _wait_resolved(self, deadline: float | None, give_up: Callable[[], bool] = lambda: False) -> int:
        """Hand over what is gathered and wait until nothing is unresolved, `deadline` passes or
        `give_up()` says so; how many are left."""
        with self._state.cond:
            self._state.flush_now = True
            self._state.cond.notify_all()
            while (self._state.ledger or self._state.settling) and not give_up():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._state.cond.wait(0.5 if left is None else min(left, 0.5))
                if self._acc.open:
                    self._state.flush_now = True
                    self._state.cond.notify_all()
            return len(self._state.ledger)

    def close(self, timeout: float | None = None) -> None:
        """Deliver everything already accepted, then stop every actor of this producer.

        Waits up to `timeout` s (without one, until every message has ended, which
        `delivery.timeout.ms` bounds) for what was sent, then shuts the pipeline down in order,
        all of it bounded (`CLOSE_GRACE` s, or what is left of `timeout`: driver/producer_close.py).
        Once an actor of the pipeline has died it does not wait for what that actor held: the
        living stages close in order and deliver what they have, and the rest fails with an
        `OutcomeUnknownError` naming the dead actor (a request may have carried it). It does
        not raise for a dead actor; no actor of this producer is left.
        From a delivery callback (`on_delivery`, or a done-callback of a future it returned) it
        is `close(0)` (`Closer.close_from_callback`)."""
        self._closer.close(timeout)

    def _fail_unresolved(self, error: Exception) -> None:
        self.expire(self.unresolved_before(None), error)

    # -- what the watchdog uses (driver/producer_watchdog.py) --------------------------

    @property
    def buffer_in_use(self) -> int:
        """Bytes of the messages accepted and not yet ended: what buffer.memory bounds."""
        return self._state.ledger.unresolved_bytes

    @property
    def _closed(self) -> bool:
        """No new sends are taken (read by spark_bridge's producer cache)."""
        return self._state.closed

    @property
    def stopping(self) -> bool:
        """close() is shutting the pipeline down (on purpose: its actors end now)."""
        return self._state.stopping

    def watch_mark(self) -> int | None:
        """The id the next message will get (every message sent so far has a smaller one), or
        None once the producer is stopping with nothing unresolved: nothing left to watch."""
        with self._state.cond:
            if self._state.stopping and not self._state.ledger:
                return None
            return self._state.ledger.next_id

    def unresolved_before(self, cutoff: int | None) -> list[list[int]]:
        """The ids of the messages still unresolved, below `cutoff` (None: all), in groups."""
        with self._state.cond:
            return self._state.ledger.unresolved_before(cutoff)

    def expire(self, groups: list[list[int]], error: Exception) -> None:
        """End these messages (unresolved ones; the others are skipped) with `error`; those still
        gathered here are then never handed on."""
        with self._state.cond:
            self._state.expired_gathered = bool(self._acc.open or self._acc.ready)
        self._settlement.resolve([Outcome.failed(ids, error) for ids in groups])

    def ray_gone(self) -> None:
        """Ray was shut down under this producer, and its actors with it: fail what is still
        pending (what was still gathered here as not delivered, what the pipeline had as outcome
        unknown), say no more sends, and let the background threads end."""
        with self._state.cond:
            if self._state.stopping:
                return
            self._state.closed = self._state.stopping = True
            gathered = self._acc.drop()  # nothing to hand them to; failed just below
            self._state.cond.notify_all()
        self._settlement.fail_gathered(gathered, ProducerClosedError("Ray was shut down before the message was delivered"))
        self._fail_unresolved(OutcomeUnknownError(f"Ray was shut down with the message in the producer's pipeline; "
                                                  f"{MAY_BE_WRITTEN}"))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------- utilities


def _check_waits(config: Mapping[str, Any]) -> None:
    """A ConfigError naming a time key longer than a thread can wait (the producer waits on each)."""
    for key in WAITED_ON:
        if config[key] / 1000 > threading.TIMEOUT_MAX:
            raise ConfigError(f"{key}: {config[key]} ms is longer than a thread can wait "
                              f"({threading.TIMEOUT_MAX:.0f} s)")

