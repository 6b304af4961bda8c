"""Transactions: the state of one transactional producer, and its requests to the coordinators.

Cardinality: one `TransactionManager` and one `TransactionCoordinator` per transactional
producer (per `transactional.id`). The producer calls them; `TransactionCoordinator` calls
`Cluster` (FindCoordinator with key_type 1, then InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn on the transaction coordinator, TxnOffsetCommit on the group
coordinator) and records every outcome in the manager.

`TransactionManager` is the one owner of the transaction's state, as the Java client's
`TransactionManager` is: its state, the producer id and epoch, the partitions and group offsets
added to the current transaction, and the error that ended it. It does no I/O. Each call
moves it from one of its legal states to one target (Java's `State.isTransitionValid`):

    init_transactions     uninitialized, initializing*               -> initializing
    initialized           initializing                               -> ready
    begin_transaction     ready                                      -> in_transaction
    commit_transaction    in_transaction, committing*                -> committing
    abort_transaction     in_transaction, abortable_error, aborting* -> aborting
    completed             committing, aborting                       -> ready
    an abortable error    in_transaction, committing, abortable_error -> abortable_error
                          (while aborting it is moot and ignored, as in Java)
    a fatal error         any state                                  -> fatal_error

A call that is not legal raises `TransactionStateError`; once fatal, every call raises the
`TransactionFatalError` that made it so. The starred sources are retries after a
`TransactionTimeoutError`: Java keeps the pending result of a timed-out call and lets the same
call be made again, which is what they allow.

Errors are classified as in Java's `TransactionManager` handlers (InitProducerIdHandler,
AddPartitionsToTxnHandler, AddOffsetsToTxnHandler, TxnOffsetCommitHandler, EndTxnHandler,
FindCoordinatorHandler, and `handleFailedBatch` for a failed send):
- retriable: COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR (find the coordinator again),
  COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS; for AddPartitionsToTxn and
  TxnOffsetCommit also UNKNOWN_TOPIC_OR_PARTITION; for TxnOffsetCommit REQUEST_TIMED_OUT
  (find the group coordinator again); a dropped connection or a request timeout.
- abortable: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED and
  any other partition error of AddPartitionsToTxn; a send that failed for any cause not fatal.
- fatal: PRODUCER_FENCED and INVALID_PRODUCER_EPOCH (`ProducerFencedError`),
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING,
  INVALID_TXN_STATE, UNSUPPORTED_VERSION, UNSUPPORTED_FOR_MESSAGE_FORMAT, and any error a
  handler does not expect.
Retries are bounded by the call's timeout (`max.block.ms`, as Java's); past it
`TransactionTimeoutError` leaves the state as it was.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import messages
from .admin import TopicPartition
from .cluster import Cluster
from .errors import (
    BY_NAME,
    BrokerConnectionError,
    BrokerError,
    ConfigError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    TransactionStateError,
    TransactionTimeoutError,
    UnsupportedVersionError,
    code_for,
)
from .protocol import Api, Struct

log = logging.getLogger("raykafka.wire.transactions")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
TRANSACTION_KEY_TYPE = 1  # FindCoordinator key_type of a transaction coordinator (0: a group's)
GROUP_KEY_TYPE = 0
# AddPartitionsToTxn v4+ batch several transactions and are spoken between brokers only; a
# client speaks v0-3 (as Java's AddPartitionsToTxnRequest.Builder.forClient).
ADD_PARTITIONS_CLIENT_MAX_VERSION = 3


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


S = TxnState
# call -> (the states it is legal in, the state it moves to)
TRANSITIONS: dict[str, tuple[frozenset[TxnState], TxnState]] = {
    "init_transactions": (frozenset({S.UNINITIALIZED, S.INITIALIZING}), S.INITIALIZING),
    "initialized": (frozenset({S.INITIALIZING}), S.READY),
    "begin_transaction": (frozenset({S.READY}), S.IN_TRANSACTION),
    "commit_transaction": (frozenset({S.IN_TRANSACTION, S.COMMITTING}), S.COMMITTING),
    "abort_transaction": (frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING}), S.ABORTING),
    "completed": (frozenset({S.COMMITTING, S.ABORTING}), S.READY),
    "abortable_error": (frozenset({S.IN_TRANSACTION, S.COMMITTING, S.ABORTABLE_ERROR}), S.ABORTABLE_ERROR),
    "fatal_error": (frozenset(TxnState), S.FATAL_ERROR),
}


# ---------------------------------------------------------------------------
# Classifying errors


class Action(enum.Enum):
    """What a transactional call does with an error code."""

    RETRY = "retry"
    FIND_COORDINATOR = "find_coordinator"  # retry, after looking the coordinator up again
    ABORTABLE = "abortable"
    FATAL = "fatal"


def _codes(*names: str) -> frozenset[int]:
    return frozenset(BY_NAME[name].code for name in names)


_FIND_COORDINATOR = _codes("COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")
_RETRY = _codes("COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS")
FENCED = _codes("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
FATAL = FENCED | _codes("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
                        "INVALID_PRODUCER_ID_MAPPING", "INVALID_TXN_STATE", "UNSUPPORTED_VERSION",
                        "UNSUPPORTED_FOR_MESSAGE_FORMAT")
ABORTABLE = _codes("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "OPERATION_NOT_ATTEMPTED")
# TxnOffsetCommit's group metadata is not the group's now (a rebalance came first): Java's
# TxnOffsetCommitHandler makes it abortable (CommitFailedException), not fatal
GROUP_MOVED_ON = _codes("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_INSTANCE_ID")
_UNKNOWN_TOPIC_OR_PARTITION = BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"].code
_REQUEST_TIMED_OUT = BY_NAME["REQUEST_TIMED_OUT"].code


def classify(api: Api, code: int) -> Action:
    """What a transactional request to `api` does when answered `code` (not 0)."""
    if code in _FIND_COORDINATOR or (api is messages.TXN_OFFSET_COMMIT and code == _REQUEST_TIMED_OUT):
        return Action.FIND_COORDINATOR
    if code in _RETRY:
        return Action.RETRY
    if code == _UNKNOWN_TOPIC_OR_PARTITION and api in (messages.ADD_PARTITIONS_TO_TXN, messages.TXN_OFFSET_COMMIT):
        return Action.RETRY
    if code in FATAL:
        return Action.FATAL
    if code in ABORTABLE or api is messages.ADD_PARTITIONS_TO_TXN or (
            api is messages.TXN_OFFSET_COMMIT and code in GROUP_MOVED_ON):
        return Action.ABORTABLE
    return Action.FATAL  # a handler of Java's meets an error it does not expect: fatal


def error_for(action: Action, code: int, context: str) -> TransactionError:
    """The named error for an abortable or fatal `code`."""
    text = f"{context}: {code_for(code).name} ({code}): {code_for(code).description}"
    if action is Action.ABORTABLE:
        return TransactionAbortableError(text, code)
    if code in FENCED:
        return ProducerFencedError(text, code)
    return TransactionFatalError(text, code)


def send_error(code: int, context: str) -> TransactionError:
    """A send in the transaction failed with `code` for good (Java's `handleFailedBatch`): fatal
    if it says the producer is fenced or unauthorized, else the transaction must abort."""
    return error_for(Action.FATAL if code in FATAL else Action.ABORTABLE, code, context)


def failed_send(error: BaseException, context: str) -> TransactionError:
    """What a message of the transaction that ended in `error` makes of the transaction: the
    transactional error it names already (fenced, fatal, abortable), else `send_error` of the
    broker's code, else (a timeout, an unknown topic, a local refusal) abortable."""
    if isinstance(error, (TransactionAbortableError, TransactionFatalError)):
        return error
    if isinstance(error, BrokerError):
        return send_error(error.code, f"{context}: {error.context}" if error.context else context)
    return TransactionAbortableError(f"{context}: {type(error).__name__}: {error}")


# ---------------------------------------------------------------------------
# The state


@dataclass(frozen=True)
class GroupOffset:
    """An offset a transaction commits for a consumer group's partition."""

    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


class TransactionManager:
    """The one owner of a transactional producer's state; no I/O, no Ray."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int):
        if not transactional_id:
            raise ConfigError(f"transactional.id: must be a non-empty string, not {transactional_id!r}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.partitions: set[TopicPartition] = set()  # added to the current transaction
        self.groups: set[str] = set()  # consumer groups added (AddOffsetsToTxn)
        self.offsets: dict[str, dict[TopicPartition, GroupOffset]] = {}  # committed with the transaction
        self.last_error: TransactionError | None = None

    def __repr__(self) -> str:
        return (f"TransactionManager({self.transactional_id!r}, {self.state.value}, "
                f"producer {self.producer_id}/{self.producer_epoch})")

    # -- transitions, in the order they happen -------------------------------

    def start_init(self) -> None:
        self._transition("init_transactions")

    def initialized(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId answered: the producer id and epoch every request of ours carries."""
        self._transition("initialized")
        self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def begin(self) -> None:
        self._transition("begin_transaction")

    def partitions_to_add(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Those of `partitions` the transaction does not hold yet (AddPartitionsToTxn must add
        them before the first Produce to them)."""
        self._require(TxnState.IN_TRANSACTION, "add partitions to the transaction")
        return sorted(set(partitions) - self.partitions)

    def partitions_added(self, partitions: Iterable[TopicPartition]) -> None:
        self._require(TxnState.IN_TRANSACTION, "add partitions to the transaction")
        self.partitions.update(partitions)

    def is_send_allowed(self, partition: TopicPartition) -> bool:
        """A batch may go to `partition` only within a transaction that holds it."""
        return self.state is TxnState.IN_TRANSACTION and partition in self.partitions

    def check_send_offsets(self, group_id: str) -> None:
        self._require(TxnState.IN_TRANSACTION, "send_offsets_to_transaction")
        if not group_id:
            raise TransactionStateError("send_offsets_to_transaction needs a consumer group id")

    def group_added(self, group_id: str) -> None:
        self._require(TxnState.IN_TRANSACTION, "send_offsets_to_transaction")
        self.groups.add(group_id)

    def offsets_added(self, group_id: str, offsets: Mapping[TopicPartition, GroupOffset]) -> None:
        self._require(TxnState.IN_TRANSACTION, "send_offsets_to_transaction")
        self.offsets.setdefault(group_id, {}).update(offsets)

    @property
    def started(self) -> bool:
        """The coordinator knows of the transaction (a partition or a group was added); one
        that never started ends without an EndTxn."""
        return bool(self.partitions or self.groups)

    def start_commit(self) -> None:
        self._transition("commit_transaction")

    def start_abort(self) -> None:
        self._transition("abort_transaction")

    def completed(self) -> None:
        """EndTxn answered (or the transaction never started): ready for the next one."""
        self._transition("completed")
        self.partitions.clear()
        self.groups.clear()
        self.offsets.clear()
        self.last_error = None

    def fail(self, error: TransactionError) -> TransactionError:
        """Record an abortable or fatal error; return it for the caller to raise. An abortable
        error while aborting (a send of the aborted transaction failing) is moot; one in a state
        that holds no transaction is illegal."""
        if isinstance(error, TransactionFatalError):
            if self.state is TxnState.FATAL_ERROR:  # fatal already: the first cause stands
                assert self.last_error is not None
                return self.last_error
            self._transition("fatal_error")
            self.last_error = error
        elif not (isinstance(error, TransactionAbortableError) and self.state is TxnState.ABORTING):
            self._transition("abortable_error")
            self.last_error = error
        return error

    # -- utilities -----------------------------------------------------------

    def _transition(self, call: str) -> None:
        self._raise_if_fatal()
        sources, target = TRANSITIONS[call]
        if self.state not in sources:
            raise self._illegal(call)
        if target is not self.state:
            log.debug("transactions/%s state change %s -> %s", self.transactional_id, self.state.value, target.value)
        self.state = target

    def _require(self, state: TxnState, call: str) -> None:
        self._raise_if_fatal()
        if self.state is not state:
            raise self._illegal(call)

    def _raise_if_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error

    def _illegal(self, call: str) -> TransactionStateError:
        cause = f" (after {self.last_error})" if self.last_error is not None else ""
        return TransactionStateError(
            f"transactional.id {self.transactional_id!r}: {call} is not legal in state {self.state.value}{cause}")


# ---------------------------------------------------------------------------
# The requests


class TransactionCoordinator:
    """The protocol calls of one transactional producer, each retried within `timeout_ms`.

    Calls one at a time (as Java's one in-flight transactional request): the producer awaits
    each before the next. Every outcome goes through `manager`.
    """

    def __init__(self, cluster: Cluster, manager: TransactionManager, *, timeout_ms: int | None = None):
        self.cluster = cluster
        self.manager = manager
        self.timeout_ms = timeout_ms if timeout_ms is not None else cluster.config["max.block.ms"]
        self.retry_backoff_ms = cluster.config["retry.backoff.ms"]

    async def init_transactions(self) -> None:
        """A producer id and epoch for `transactional.id`: the coordinator aborts what an earlier
        producer with the same id left open and fences it (its epoch is now stale)."""
        m = self.manager
        m.start_init()
        response = await self._call(
            "InitProducerId", messages.INIT_PRODUCER_ID, TRANSACTION_KEY_TYPE, m.transactional_id,
            lambda _v: {"transactional_id": m.transactional_id,
                        "transaction_timeout_ms": m.transaction_timeout_ms,
                        "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH},
            lambda r: [r.error_code])
        m.initialized(response.producer_id, response.producer_epoch)
        log.info("transactions/%s initialized: producer id %d epoch %d",
                 m.transactional_id, response.producer_id, response.producer_epoch)

    def begin_transaction(self) -> None:
        self.manager.begin()

    async def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Add `partitions` to the transaction (those not in it yet) before producing to them."""
        m = self.manager
        new = m.partitions_to_add(partitions)
        if not new:
            return
        topics: dict[str, list[int]] = {}
        for tp in new:
            topics.setdefault(tp.topic, []).append(tp.partition)
        wanted = [{"name": t, "partitions": ps} for t, ps in topics.items()]
        await self._call(
            "AddPartitionsToTxn", messages.ADD_PARTITIONS_TO_TXN, TRANSACTION_KEY_TYPE, m.transactional_id,
            lambda _v: {"v3_and_below_transactional_id": m.transactional_id,
                        "v3_and_below_producer_id": m.producer_id,
                        "v3_and_below_producer_epoch": m.producer_epoch,
                        "v3_and_below_topics": wanted},
            lambda r: [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition],
            max_version=ADD_PARTITIONS_CLIENT_MAX_VERSION)
        m.partitions_added(new)

    async def send_offsets(self, offsets: Mapping[TopicPartition, GroupOffset | int], group_id: str, *,
                           generation_id: int = -1, member_id: str = "",
                           group_instance_id: str | None = None) -> None:
        """Commit `offsets` of consumer group `group_id` with the transaction (consume-transform-
        produce): AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
        group's coordinator. The group sees them only if the transaction commits."""
        m = self.manager
        m.check_send_offsets(group_id)
        given = {tp: o if isinstance(o, GroupOffset) else GroupOffset(int(o)) for tp, o in offsets.items()}
        if group_id not in m.groups:
            await self._call(
                "AddOffsetsToTxn", messages.ADD_OFFSETS_TO_TXN, TRANSACTION_KEY_TYPE, m.transactional_id,
                lambda _v: {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                            "producer_epoch": m.producer_epoch, "group_id": group_id},
                lambda r: [r.error_code])
            m.group_added(group_id)
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, o in sorted(given.items()):
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": o.offset,
                "committed_leader_epoch": o.leader_epoch, "committed_metadata": o.metadata})
        await self._call(
            "TxnOffsetCommit", messages.TXN_OFFSET_COMMIT, GROUP_KEY_TYPE, group_id,
            lambda _v: {"transactional_id": m.transactional_id, "group_id": group_id,
                        "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                        "generation_id": generation_id, "member_id": member_id,
                        "group_instance_id": group_instance_id,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            lambda r: [p.error_code for t in r.topics for p in t.partitions])
        m.offsets_added(group_id, given)

    async def commit_transaction(self) -> None:
        """EndTxn(commit). The producer flushes the transaction's sends first; a send that failed
        has put the manager in abortable_error, where commit is illegal."""
        self.manager.start_commit()
        await self._end(committed=True)

    async def abort_transaction(self) -> None:
        self.manager.start_abort()
        await self._end(committed=False)

    # -- utilities -----------------------------------------------------------

    async def _end(self, committed: bool) -> None:
        m = self.manager
        if m.started:
            await self._call(
                "EndTxn", messages.END_TXN, TRANSACTION_KEY_TYPE, m.transactional_id,
                lambda _v: {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                            "producer_epoch": m.producer_epoch, "committed": committed},
                lambda r: [r.error_code])
        m.completed()
        log.debug("transactions/%s %s", m.transactional_id, "committed" if committed else "aborted")

    async def _call(self, name: str, api: Api, key_type: int, key: str, body: Callable[[int], dict[str, Any]],
                    codes: Callable[[Struct], list[int]], max_version: int | None = None) -> Struct:
        """One request to the coordinator of `key`, retried (after `retry.backoff.ms`) while its
        errors are retriable and `timeout_ms` lasts; an abortable or fatal answer is recorded in
        the manager and raised."""
        context = f"transactional.id {self.manager.transactional_id!r}: {name}"
        deadline = time.monotonic() + self.timeout_ms / 1000
        last = "no attempt"
        while True:
            remaining = deadline - time.monotonic()
            try:
                conn = await asyncio.wait_for(self.cluster.coordinator(key, key_type), max(remaining, 0.001))
                version = conn.version_for(api)
                if max_version is not None:
                    version = min(version, max_version)
                response = await conn.request(api, body(version), version, timeout=max(remaining, 0.001))
                failed = [c for c in codes(response) if c]
            except UnsupportedVersionError as exc:
                raise self.manager.fail(TransactionFatalError(f"{context}: {exc}", BY_NAME["UNSUPPORTED_VERSION"].code)) from exc
            except BrokerError as exc:  # FindCoordinator's answer
                failed = [exc.code]
            except (BrokerConnectionError, RequestTimedOutError) as exc:
                self.cluster.forget_coordinator(key, key_type)
                failed, last = [], f"{type(exc).__name__}: {exc}"
            except TimeoutError:  # the time ran out while connecting to the coordinator
                self.cluster.forget_coordinator(key, key_type)
                failed, last = [], f"{last}; then no connection to the coordinator in the time left"
            else:
                if not failed:
                    return response
            actions = [classify(api, c) for c in failed]
            for action in (Action.FATAL, Action.ABORTABLE):
                if action in actions:
                    raise self.manager.fail(error_for(action, failed[actions.index(action)], context))
            if failed:
                last = ", ".join(code_for(c).name for c in failed)
                if Action.FIND_COORDINATOR in actions:
                    self.cluster.forget_coordinator(key, key_type)
            backoff = self.retry_backoff_ms / 1000
            if time.monotonic() + backoff >= deadline:
                raise TransactionTimeoutError(f"{context}: no success within {self.timeout_ms} ms (last: {last})")
            log.debug("transactions/%s %s retrying after %s", self.manager.transactional_id, name, last)
            await asyncio.sleep(backoff)
