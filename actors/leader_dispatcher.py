"""LeaderDispatcher: one per producer, with a state machine per partition of every topic
(Sarama's partitionProducer). Finds each partition's leader and sends its messages to that
broker's worker, keeping their order across retries and leader changes.

Called by the PartitionDispatcher only, with the new messages of every topic and, interleaved
in no particular order, the messages the RetryHandler sends back (through the TopicDispatcher and
the PartitionDispatcher); and once by the TopicDispatcher (`set_producer_id`, before any
message). A synchronous actor runs one caller's calls in order, but two streams meet here, so
order within a partition is kept by Sarama's chaser protocol, held in `LeaderDispatcherState`:

- a batch whose retry count equals the retry level passes through;
- a higher retry count is a new retry level: raise the retry level, send a chaser (FIN) down
  the old path, abandon that broker, send the batch down the new path;
- a lower retry count waits in that level's buffer;
- a chaser back at the retry level closes that level: the retry level steps down, flushing
  each level's buffer, until a level still expects its chaser or the retry level is 0.

A partition moves to another broker only for a batch back from the retry loop, and the broker's
Flusher (in its BrokerWorker) that failed it muted the partition first (`flusher.PartitionMuter`): the partition's later
batches there are retried, not sent. So without idempotence, with one request in flight per
connection, a retry sent to the new leader never passes a batch of its partition still in
flight to the old one: one batch of a partition is in flight at a time, across brokers too.

A partition whose leader cannot be found (the broker unreachable, or restarting) holds its
batches, in the order they came and whatever their retry level, behind nothing else: the actor's
timer calls `retry_held` on itself after `HoldBackoff`'s wait, and once a refresh finds the leader
they go through `dispatch` again in that order; those still held when their delivery.timeout.ms
runs out fail with `DeliveryTimeoutError` naming the refresh's error (`OutcomeUnknownError` for a
batch the broker may have written: `batch.timed_out`). New batches waiting behind a retry (retry
level 0's buffer) fail the same way when their delivery.timeout.ms runs out before the chaser
comes back, on the actor's deadline timer (`expire_waiting`): nothing else would end them but the
driver's watchdog, later, and as "outcome unknown" though they were never sent.

Calls: the BrokerWorker of the leader's broker (`add`; get/ref on selection, unref once the
calls a partition had in flight there when it left have returned, `LeftBrokers`, through the
RetryHandler's registry), and the RetryHandler's mailbox (`report`: messages that
cannot be routed, and the batch of a call to the BrokerWorker that failed, with its cause; on
a RESET, `first_unresolved`). With idempotence, each batch gets its partition's
sequence numbers here as it leaves, in the partition's order, from the partition's
`PartitionSequences` (actors/idempotence.py, which owns the producer id, epoch and sequences).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import ray

from ..wire.cluster import Cluster
from ..wire.errors import (
    BY_NAME,
    BrokerError,
    KafkaError,
    TransactionAbortableError,
    TransactionStateError,
)
from ..wire.loop import LoopThread
from ..wire.producer_id import init_producer_id
from .batch import FIN, RESET, SYN, MessageBatch
from .caller_order import calls_to
from .calls import CallWindow, pipeline_error, when_returned
from .hold import HoldBackoff, SelfTimer, Wake, closed_groups, split_expired, timed_out_groups
from .idempotence import NoNewProducerId, PartitionSequences
from .options import ASK_GROUP
from .producer_results import report_failed

__all__ = ["HoldBackoff", "LeaderDispatcher", "LeaderDispatcherState", "find_leader", "seconds_to_deadline"]

log = logging.getLogger("raykafka.producer.leader")

LEADER_NOT_AVAILABLE = BY_NAME["LEADER_NOT_AVAILABLE"].code
# a deadline's wake comes this long after it (a batch is past its delivery.timeout.ms only once
# more than that has passed), and never sooner, so a wake cannot spin
DEADLINE_SLACK_S = 0.01
# how often the actor looks whether the calls to a broker its partitions left have returned
RELEASE_POLL_S = 0.05


class LeaderBackend(Protocol):
    """What the state machine needs from the world; the actor gives it Ray, tests give it lists."""

    def update_leader(self) -> None:
        """Refresh metadata and select the leader's broker (ref its BrokerWorker); raise on failure."""

    def new_producer_id(self) -> tuple[int, int]:
        """A fresh producer id and epoch (InitProducerId)."""

    def first_unresolved(self, producer_id: int, numbering: int) -> int:
        """The first sequence of this numbering whose batch has not ended (succeeded or failed)."""

    def send(self, batch: MessageBatch) -> None:
        """Send to the selected broker's BrokerWorker."""

    def abandon(self) -> None:
        """Leave the selected broker's BrokerWorker, sending it first what was sent for it (the
        chaser among them); its reference is dropped once the calls sent there have returned."""

    def return_errors(self, batches: list[MessageBatch], error: Exception) -> None:
        """Report these messages as failed."""


@dataclass
class _Level:
    buf: list[MessageBatch] = field(default_factory=list)
    expect_chaser: bool = False


class LeaderDispatcherState:
    """Sarama's partitionProducer state: the retry level (Sarama's highWatermark; not a partition's end),
    and per retry level a flag and a buffer.

    Levels are kept in a dict (only the levels in use), not an n+1 list: `retries` may be 2**31-1.
    """

    def __init__(self, topic: str, partition: int, backend: LeaderBackend, *,
                 producer_id: int = -1, producer_epoch: int = -1, delivery_timeout_ms: int | None = None):
        self.topic = topic
        self.partition = partition
        self.backend = backend
        self.retry_level = 0
        self.levels: dict[int, _Level] = {}
        self.selected = False
        self.path = f"producer/leader/{topic}/{partition}"
        self.sequences = PartitionSequences(producer_id, producer_epoch, self.path)
        # batches waiting for a reachable leader, in the order they came (the Java producer's
        # batch waiting for metadata): sent by `retry_held` once a refresh finds the leader, or
        # failed when their delivery.timeout.ms runs out
        self.held: list[MessageBatch] = []
        self.delivery_timeout_ms = delivery_timeout_ms

    def level(self, retries: int) -> _Level:
        found = self.levels.get(retries)
        if found is None:
            found = self.levels[retries] = _Level()
        return found

    # -- the entry point ------------------------------------------------------

    def dispatch(self, batch: MessageBatch) -> None:
        if self.held:  # behind those already waiting for a leader, whatever its retry level
            self.held.append(batch)
            return
        if batch.flags & RESET:
            self.reset_producer_id(batch.producer_id, batch.numbering, batch.base_sequence)
            return
        if batch.retries > self.retry_level:
            if batch.flags & FIN:  # cannot happen: a chaser never outruns its own level
                log.warning("%s dropping a chaser from above the retry level (%d > %d)", self.path,
                            batch.retries, self.retry_level)
                return
            if not self.raise_retry_level(batch.retries):
                self._hold([batch])
                return
        elif self.retry_level > 0:
            if batch.retries < self.retry_level:
                if batch.flags & FIN:
                    self.level(batch.retries).expect_chaser = False
                else:
                    self.level(batch.retries).buf.append(batch)
                return
            if batch.flags & FIN:
                self.level(self.retry_level).expect_chaser = False
                self.flush_retry_buffers()
                return
        elif batch.flags & FIN:  # retry level 0: a late chaser of a level already flushed
            return
        self._send(batch)

    # -- transitions, in the order they happen ---------------------------------

    def raise_retry_level(self, level: int) -> bool:
        """Enter retry level `level`: chase the old path with a FIN and abandon it. False if no leader."""
        if not self.selected and not self._select():
            return False
        log.info("%s state change to [retrying-%d]", self.path, level)
        self.retry_level = level
        self.level(level).expect_chaser = True
        self.backend.send(MessageBatch.control(self.topic, self.partition, FIN, retries=level - 1))
        log.info("%s abandoning broker", self.path)
        self.backend.abandon()
        self.selected = False
        return True

    def flush_retry_buffers(self) -> None:
        """Step the retry level down, releasing each level's backlog, until a level waits for its chaser."""
        log.info("%s state change to [flushing-%d]", self.path, self.retry_level)
        while True:
            self.levels.pop(self.retry_level, None)
            self.retry_level -= 1
            below = self.level(self.retry_level)
            if below.buf:
                if not self.selected and not self._select():
                    self._hold(below.buf)
                else:
                    for batch in below.buf:
                        self._send_selected(batch)
            below.buf = []
            if below.expect_chaser:
                log.info("%s state change to [retrying-%d]", self.path, self.retry_level)
                return
            if self.retry_level == 0:
                self.levels.clear()
                log.info("%s state change to [normal]", self.path)
                return

    def reset_producer_id(self, broken: int, numbering: int, base_sequence: int) -> None:
        """A RESET came back: the partition's sequence broke at `base_sequence`
        (`PartitionSequences.reset` decides whether to number anew under a new producer id)."""
        self.sequences.reset(broken, numbering, base_sequence, self.backend.first_unresolved,
                             self.backend.new_producer_id)

    # the partition's numbers, read-only (`PartitionSequences` owns them)
    producer_id = property(lambda self: self.sequences.producer_id)
    producer_epoch = property(lambda self: self.sequences.producer_epoch)
    numbering = property(lambda self: self.sequences.numbering)
    next_sequence = property(lambda self: self.sequences.next_sequence)

    # -- waiting for a leader ---------------------------------------------------

    def retry_held(self, now_ms: float) -> bool:
        """Refresh the leader for the held batches: if found, dispatch them again in the order they
        came; if not, fail those past delivery.timeout.ms with the refresh's error. True if some
        still wait."""
        if not self.held:
            return False
        if not self.selected and not self._select():
            self._expire_held(now_ms)
            return bool(self.held)
        log.info("%s leader found again: releasing %d held batches", self.path, len(self.held))
        held, self.held = self.held, []
        for batch in held:
            self.dispatch(batch)
        return bool(self.held)

    def _hold(self, batches: list[MessageBatch]) -> None:
        if not self.held:
            log.info("%s no leader (%s): holding batches until metadata is back", self.path, self._last_error)
        self.held.extend(batches)

    def _expire_held(self, now_ms: float) -> None:
        self.held, expired = split_expired(self.held, now_ms, self.delivery_timeout_ms)
        why = f"no leader for {self.topic}/{self.partition}; last error: {self._last_error}"
        for batches, error in timed_out_groups(expired, self.delivery_timeout_ms, why):
            self.backend.return_errors(batches, error)

    # -- new batches waiting behind a retry -------------------------------------

    def next_deadline_ms(self) -> float | None:
        """When the oldest new batch waiting behind a retry (retry level 0's buffer) reaches its
        delivery.timeout.ms; None if none waits or nothing bounds it."""
        waiting = self.levels.get(0)
        if self.delivery_timeout_ms is None or waiting is None:
            return None
        created = [b.created_ms for b in waiting.buf if b.created_ms]
        return min(created) + self.delivery_timeout_ms if created else None

    def expire_waiting(self, now_ms: float) -> None:
        """Fail the new batches that waited behind a retry past their delivery.timeout.ms, its
        chaser not back yet. This pipeline has not sent them: they have no sequence yet, so the
        partition's numbering keeps no gap, and they fail as not delivered unless a dead
        pipeline may have written them (`possibly_written`: a heal's resend). A retried batch
        waiting at a higher level was sent: it keeps the driver's bound (outcome unknown)."""
        waiting = self.levels.get(0)
        if waiting is None or not waiting.buf:
            return
        waiting.buf, expired = split_expired(waiting.buf, now_ms, self.delivery_timeout_ms)
        why = (f"waiting behind a retry of {self.topic}/{self.partition} (retry level {self.retry_level}) "
               f"whose chaser has not come back")
        for batches, error in timed_out_groups(expired, self.delivery_timeout_ms, why):
            self.backend.return_errors(batches, error)

    # -- utilities -------------------------------------------------------------

    _last_error: Exception = KafkaError("no leader")

    def _select(self) -> bool:
        try:
            self.backend.update_leader()
        except KafkaError as exc:
            self._last_error = exc
            return False
        self.selected = True
        self.backend.send(MessageBatch.control(self.topic, self.partition, SYN))
        return True

    def _send(self, batch: MessageBatch) -> None:
        if not self.selected and not self._select():
            self._hold([batch])
            return
        self._send_selected(batch)

    def _send_selected(self, batch: MessageBatch) -> None:
        if self.sequences.broken is not None and not batch.is_control:  # it would be refused until it timed out
            self.backend.return_errors([batch], TransactionAbortableError(self.sequences.broken))
            return
        self.sequences.number(batch)
        batch.partition = self.partition
        self.backend.send(batch)


# ---------------------------------------------------------------------------- the Ray actor


class LeaderDispatcher:
    """The actor: a `LeaderDispatcherState` per partition of every topic, each with its own
    route (`PartitionRoute`) to the broker that leads it.

    One process for every topic and partition: a Ray actor is a process (~130 MB, ~1 s to
    start), and a hundred partitions would otherwise cost a hundred. The state machines share
    the actor's one thread, so a partition waiting on a metadata refresh holds the others up to
    `request.timeout.ms`; their order is not affected."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.loop = LoopThread("leader-dispatcher")
        self.cluster = Cluster(ctx.config)
        self.partitions: dict[tuple[str, int], LeaderDispatcherState] = {}
        self.timers = PartitionTimers(HoldBackoff(ctx.config["retry.backoff.ms"]),
                                      SelfTimer("retry_held"), SelfTimer("expire_waiting"))
        self.outbox = Outbox()
        self.left_brokers = LeftBrokers()  # the old paths partitions left, released once their calls end
        self.release_timer = SelfTimer("release_left")
        self.closed = False  # a timer's call that comes after `shutdown` does nothing

    def ping(self) -> bool:
        return True

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """The id and epoch to number under (InitProducerId, or init_transactions): set by the
        TopicDispatcher before it forwards any message, so every partition starts under it."""
        if self.partitions:
            raise TransactionStateError(f"producer id set after messages went out under "
                                        f"{self.ctx.producer_id}/{self.ctx.producer_epoch}")
        self.ctx.producer_id, self.ctx.producer_epoch = producer_id, producer_epoch

    def dispatch(self, batches: list[MessageBatch]) -> None:
        try:
            for batch in batches:
                key = (batch.topic, batch.partition)
                state = self.partitions.get(key)
                if state is None:
                    state = self.partitions[key] = LeaderDispatcherState(
                        batch.topic, batch.partition, PartitionRoute(self, batch.topic, batch.partition),
                        producer_id=self.ctx.producer_id, producer_epoch=self.ctx.producer_epoch,
                        delivery_timeout_ms=self.ctx.config["delivery.timeout.ms"])
                state.dispatch(batch)
        finally:
            self.outbox.send()
            self._arm_timer()

    def send_parked(self) -> None:
        """Called once the oldest call of a partition whose window was full has returned: send
        what it kept (`Outbox`)."""
        if self.closed:
            return
        self.outbox.send()
        self._arm_timer()

    def release_left(self) -> None:
        """Called by this actor's release timer: drop the references on the brokers partitions
        left whose calls have all returned."""
        self.release_timer.fired()
        self._arm_timer()

    def retry_held(self) -> None:
        """Called by this actor's held-batch timer: try the leaders of the partitions holding batches."""
        self.timers.held.fired()
        if self.closed:
            return
        try:
            self.timers.retry_held(self.partitions.values(), time.time() * 1000)
        finally:
            self.outbox.send()
            self._arm_timer()

    def expire_waiting(self) -> None:
        """Called by this actor's deadline timer: fail the new batches that waited behind a
        retry past their delivery.timeout.ms."""
        self.timers.deadline.fired()
        if self.closed:
            return
        self.timers.expire_waiting(self.partitions.values(), time.time() * 1000)
        self._arm_timer()

    def _arm_timer(self) -> None:
        """The partitions' timers (`PartitionTimers.arm`); `send_parked` once the oldest call of
        each partition keeping batches has returned; and while a broker left waits for its calls,
        `release_left` again after `RELEASE_POLL_S`."""
        if self.closed:
            return
        self.timers.arm(self.partitions.values(), time.time() * 1000)
        if self.outbox.parked:
            self.outbox.wake_when_room(ray.get_runtime_context().current_actor.send_parked.remote)
        if self.left_brokers.release_finished(self._release):
            self.release_timer.arm(RELEASE_POLL_S)

    def _release(self, node_id: int, generation: int) -> None:
        ray.get(self.ctx.retry_handler.release_broker.remote(node_id, generation))

    def shutdown(self) -> None:
        """Release the brokers (a leader's BrokerWorker closes it when its last writer has)."""
        self.closed = True
        self.timers.cancel()
        self.release_timer.cancel()
        try:
            fail_waiting(self.partitions.values())
            for state in self.partitions.values():
                if state.selected:
                    state.backend.abandon()
                state.backend.window.drain()
            self.left_brokers.release_all(self._release)
            self.loop.run(self.cluster.close(), 5)
        finally:
            self.loop.stop()


def fail_waiting(states: Any) -> None:
    """At close: every batch still waiting in these partitions' states (buffered at a retry level,
    or held while there was no leader) fails through its state's backend, and none waits after:
    as `ProducerClosedError`, or `OutcomeUnknownError` where the broker may have written it."""
    for state in states:
        pending = [b for level in state.levels.values() for b in level.buf]
        pending += [b for b in state.held if not b.is_control]
        state.held = []
        for level in state.levels.values():
            level.buf = []
        for batches, error in closed_groups(pending, "a retry"):
            state.backend.return_errors(batches, error)


class PartitionTimers:
    """The LeaderDispatcher's two timers over its partitions' states, for either shell (the
    actor's `SelfTimer`s, the in-process pipeline's `Wake`s): `held` tries the leaders of the
    partitions holding batches again after `backoff`'s wait; `deadline` fails the new batches
    waiting behind a retry at the first one's delivery.timeout.ms. Each shell calls `arm` after
    every call it takes, and `retry_held` / `expire_waiting` when a timer fires."""

    def __init__(self, backoff: HoldBackoff, held: Wake, deadline: Wake):
        self.backoff = backoff
        self.held = held
        self.deadline = deadline

    def arm(self, states: Collection[LeaderDispatcherState], now_ms: float) -> None:
        """After every call a shell takes (`states`: its partitions' states, read twice, not copied)."""
        if not self.held.armed and any(state.held for state in states):
            self.held.arm(self.backoff.next())
        wait = seconds_to_deadline(states, now_ms)
        if wait is not None:
            self.deadline.arm_by(wait)

    def retry_held(self, states: Iterable[LeaderDispatcherState], now_ms: float) -> None:
        waiting = False
        for state in states:
            waiting = state.retry_held(now_ms) or waiting
        if not waiting:
            self.backoff.reset()

    def expire_waiting(self, states: Iterable[LeaderDispatcherState], now_ms: float) -> None:
        for state in states:
            state.expire_waiting(now_ms)

    def cancel(self) -> None:
        self.held.cancel()
        self.deadline.cancel()


def seconds_to_deadline(states: Iterable[LeaderDispatcherState], now_ms: float) -> float | None:
    """How long until the first new batch waiting behind a retry in these partitions reaches its
    delivery.timeout.ms (at least `DEADLINE_SLACK_S`, so the wake finds it past); None if none waits."""
    deadlines = [d for state in states if (d := state.next_deadline_ms()) is not None]
    if not deadlines:
        return None
    return max(DEADLINE_SLACK_S, (min(deadlines) - now_ms) / 1000 + DEADLINE_SLACK_S)


def find_leader(loop: Any, cluster: Any, topic: str, partition: int, timeout: float) -> Any:
    """The broker leading `topic`/`partition` (a `wire.cluster` broker: node_id, host, port), by
    fresh metadata asked on `loop` (a `wire.loop.LoopThread`); raises `KafkaError` when none can
    be found (LEADER_NOT_AVAILABLE, or why the refresh failed). A backend's `update_leader`."""
    try:
        loop.run(cluster.refresh_metadata([topic]), timeout)
    except KafkaError:
        raise
    except Exception as exc:  # timeouts of the loop
        raise KafkaError(f"metadata for {topic!r}: {exc}") from exc
    leader = cluster.metadata.leader(topic, partition)
    if leader < 0:
        raise BrokerError(LEADER_NOT_AVAILABLE, f"{topic}/{partition}")
    return cluster.metadata.brokers[leader]


class PartitionRoute:
    """One partition's backend: its leader's BrokerWorker (with the reference held on it) and the
    calls in flight there; metadata and producer ids come through the actor's shared cluster."""

    def __init__(self, actor: LeaderDispatcher, topic: str, partition: int):
        self.actor = actor
        self.ctx = actor.ctx
        self.topic = topic
        self.partition = partition
        self.path = f"producer/leader/{self.topic}/{partition}"
        self.aggregator: Any = None
        self.window = CallWindow(actor.ctx.window, self._call_failed)
        self.parked: list[tuple[Any, MessageBatch]] = []  # (aggregator, batch) its full window did not take (`Outbox`)

    def update_leader(self) -> None:
        broker = find_leader(self.actor.loop, self.actor.cluster, self.topic, self.partition, self.ctx.timeout)
        # one more reference on the broker's worker (Sarama's getBrokerProducer), dropped once the
        # partition has left it and its calls there have returned (`abandon`, `LeftBrokers`)
        handle, self.generation = ray.get(self.ctx.retry_handler.get_broker.remote(broker.node_id, broker.host, broker.port))
        self.aggregator = calls_to(handle, self.generation)  # this process's numbered calls to it
        self.node_id = broker.node_id
        log.info("%s selected broker %d", self.path, broker.node_id)

    def new_producer_id(self) -> tuple[int, int]:
        if self.ctx.config["transactional.id"] is not None:  # its id is the transactional.id's alone
            raise NoNewProducerId("a transactional producer gets its producer id from init_transactions only")
        return self.actor.loop.run(init_producer_id(self.actor.cluster), self.ctx.timeout)

    def first_unresolved(self, producer_id: int, numbering: int) -> int:
        asking = self.ctx.retry_handler.first_unresolved.options(concurrency_group=ASK_GROUP)
        return ray.get(asking.remote(self.topic, self.partition, producer_id, numbering), timeout=2 * self.ctx.timeout)

    def send(self, batch: MessageBatch) -> None:
        self.actor.outbox.put(self.aggregator, self, batch)

    def _call_failed(self, batches: list[MessageBatch], exc: BaseException) -> None:
        """A call to the BrokerWorker failed (it died, say): its own batch fails, with the cause."""
        self.return_errors(batches, pipeline_error(exc))

    def abandon(self) -> None:
        """Leave the selected broker. Its calls in flight (the chaser's among them: it returns
        once the requests before it are on the wire) finish on their own, and the reference is
        dropped once they have (`LeftBrokers`): waiting here would hold up every partition of
        the actor for as long as the old broker takes to send its queue."""
        self.actor.outbox.send(leaving=self)  # the chaser just put, behind what the partition kept
        aggregator, self.aggregator = self.aggregator, None
        if aggregator is not None:
            self.actor.left_brokers.add(self.window, self.node_id, self.generation)
            self.window = CallWindow(self.ctx.window, self._call_failed)

    def return_errors(self, batches: list[MessageBatch], error: Exception) -> None:
        for batch in batches:
            batch.partition = self.partition
        report_failed(self.ctx.retry_handler.report.remote, batches, error)


class LeftBrokers:
    """The brokers partitions have left (Sarama's abandonBrokerConnection), each with the calls
    the partition still had in flight there: the reference on the broker's worker is dropped
    (the RetryHandler's `release_broker`, Sarama's unrefBrokerProducer) once they have all
    returned, so the worker is not closed under them. A failed call fails its own batches through
    its route, as before it left."""

    def __init__(self) -> None:
        self.pending: list[tuple[CallWindow, int, int]] = []  # (calls, node id, generation)

    def add(self, calls: CallWindow, node_id: int, generation: int) -> None:
        self.pending.append((calls, node_id, generation))

    def release_finished(self, release: Callable[[int, int], None]) -> bool:
        """`release(node_id, generation)` for each broker whose calls have all returned, each
        taken out before it is released (a release that raises is not made twice); whether some
        are still waiting."""
        for entry in list(self.pending):
            calls, node_id, generation = entry
            if not calls.drain(timeout=0):
                self.pending.remove(entry)
                release(node_id, generation)
        return bool(self.pending)

    def release_all(self, release: Callable[[int, int], None]) -> None:
        """At close: wait for every call, then release each broker."""
        while self.pending:
            calls, node_id, generation = self.pending.pop(0)
            calls.drain()
            release(node_id, generation)


class Outbox:
    """The batches one call of the actor sends, gathered and sent as it returns: one
    `BrokerWorker.add` per broker for all its partitions' batches (a keyed hand-over spans every
    partition), rather than one per batch. Each partition's window holds that call with the
    partition's own batches, so a failed call fails each batch once, through its own route.
    Order holds: a BrokerWorker takes one caller's calls in the order they were numbered
    (`BrokerWorkerCalls`), and a call's batches in order.

    A partition whose window is full (`CALLS_IN_FLIGHT` calls out to a broker slower than the
    load) keeps its batches (`PartitionRoute.parked`), in the order they came, and sends them
    before any newer one of its own in the first call after its oldest call has returned (the
    actor's `send_parked`, woken by `wake_when_room`). Nothing waits for it: the actor's other
    partitions, on other brokers, and its timers would wait with it. What is kept is bounded by
    the driver's buffer.memory, as everything not yet answered is. A partition leaving its
    broker sends what it kept for it at once, before its chaser (`send(leaving=route)`), past
    the window's bound.

    A numbered batch carries its numbers to the BrokerWorker, which notes it for the driver as
    it takes it, before the produce request goes (`Mailbox.noted`): no call of its own."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, PartitionRoute, MessageBatch]] = []
        self.parked: dict[PartitionRoute, None] = {}  # the partitions keeping batches, in the order they began
        self.awaited: set[Any] = set()  # the calls a wake waits on (partitions on one broker share them)

    def put(self, aggregator: Any, route: PartitionRoute, batch: MessageBatch) -> None:
        self.pending.append((aggregator, route, batch))

    def send(self, leaving: PartitionRoute | None = None) -> None:
        pending = self._unparked(leaving) + self.pending
        self.pending = []
        calls: dict[Any, list[tuple[PartitionRoute, MessageBatch]]] = {}  # aggregator -> its sends, in order
        room: dict[PartitionRoute, bool] = {}
        for aggregator, route, batch in pending:
            if route not in room:
                room[route] = route is leaving or (not route.parked and route.window.has_room())
            if room[route]:
                calls.setdefault(aggregator, []).append((route, batch))
            else:
                route.parked.append((aggregator, batch))
                self.parked[route] = None
        for aggregator, sends in calls.items():
            ref = aggregator.add.remote([batch for _, batch in sends])
            routes: dict[PartitionRoute, list[MessageBatch]] = {}
            for route, batch in sends:
                routes.setdefault(route, []).append(batch)
            for route, own in routes.items():
                route.window.add(ref, own)

    def _unparked(self, leaving: PartitionRoute | None) -> list[tuple[Any, PartitionRoute, MessageBatch]]:
        """The kept batches of each partition whose window has room again, and all of `leaving`'s."""
        out: list[tuple[Any, PartitionRoute, MessageBatch]] = []
        for route in list(self.parked):
            if route is leaving or route.window.has_room():
                out.extend((aggregator, route, batch) for aggregator, batch in route.parked)
                route.parked = []
                del self.parked[route]
        return out

    def wake_when_room(self, wake: Callable[[], Any]) -> None:
        """`wake()` once the oldest call of each partition keeping batches has returned: one wait
        on each such call, however many partitions it carried."""
        oldest = {ref for route in self.parked if (ref := route.window.oldest()) is not None}
        for ref in oldest - self.awaited:
            when_returned(ref, wake)
        self.awaited = oldest
