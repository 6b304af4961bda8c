"""`ProducerTransactions`: the driver's side of a transactional `Producer` (`transactional.id`).

    producer = Producer({"bootstrap.servers": ..., "transactional.id": "orders-etl-1"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"...")
    producer.send_offsets_to_transaction({("in", 0): 42}, "etl-group")
    producer.commit_transaction()          # or abort_transaction()

One per transactional Producer, made by it; its methods are the Producer's transactional ones
(Java's and confluent-kafka's names). Calls the TransactionOwner actor (actors/transaction_owner.py),
the one owner of the transaction's state, once per call, and the TopicDispatcher once (the
producer id from init_transactions); calls the Producer's `flush` before a commit or an abort,
so that every message sent in the transaction has ended first.

The driver keeps two things of its own, both about its own messages, not the transaction's
state: whether sends are taken now (`check_send`, on every `send`: between `begin_transaction`
and the start of `commit_transaction` or `abort_transaction`, as Java refuses a send in any other
state), and the first message of the transaction that failed (`note_outcomes`, from the
Producer's results; `note_failure`, for one it refused itself), which the commit hands to the owner: a transaction with a failed message
cannot commit (abortable, or fatal if the broker said fenced).

An actor of the pipeline that dies makes the transaction abortable (its messages fail with
`PipelineError`; a commit raises `TransactionAbortableError`), and so does a message that fails
in the pipeline (its partition's sequence may have a gap: `abort_transaction` says so); in either case
`Producer.abort_transaction` then replaces the whole pipeline and initializes the transactional.id again on the new one, which
aborts what the old epoch left open, so the next transaction goes through a pipeline alive.

`close()` with a transaction open neither commits nor aborts it, as Java's does: its messages
are delivered, and the transaction is aborted by the coordinator after `transaction.timeout.ms`,
or by the next `init_transactions` with the same transactional.id.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError

from ..actors.calls import pipeline_error
from ..wire.admin import TopicPartition
from ..wire.errors import (
    KafkaError,
    PipelineError,
    TransactionAbortableError,
    TransactionStateError,
    TransactionTimeoutError,
)
from ..wire.transactions import GroupOffset, failed_send

# a call to the owner is bounded by its own timeout; the driver waits this much longer for its answer
ANSWER_MARGIN = 5.0


class ProducerTransactions:
    def __init__(self, config: Mapping[str, Any], owner: Any, topic_dispatcher: Any,
                 flush: Callable[[float], int]):
        self.owner = owner  # the TransactionOwner actor
        self.topic_dispatcher = topic_dispatcher
        self.flush = flush  # the Producer's: how many messages are left unresolved after the wait
        self.transactional_id = config["transactional.id"]
        self.default_timeout = config["max.block.ms"] / 1000
        self._lock = threading.Lock()
        self._taking_sends = False  # begin_transaction .. commit/abort: `send` is taken
        self._in_transaction = False  # begin_transaction .. commit/abort done: failures count
        self._failure: Exception | None = None  # the transaction's first message that failed
        self._failed_in_pipeline: Exception | None = None  # the first of them that failed in the pipeline

    # -- on every send, and on every outcome -----------------------------------------

    def check_send(self) -> None:
        """Raise `TransactionStateError` unless a transaction is open for sends."""
        if not self._taking_sends:
            raise TransactionStateError(
                f"transactional.id {self.transactional_id!r}: a transactional producer sends only within a "
                "transaction: call begin_transaction() first (and init_transactions() once before it)")

    def note_outcomes(self, entries: Iterable[Any]) -> None:
        """The Producer's results (`Outcome`s): keep the first failure of the open transaction."""
        if not self._in_transaction or self._failed_in_pipeline is not None:
            return
        for entry in entries:
            if entry.error is not None:
                with self._lock:
                    if self._in_transaction and self._failed_in_pipeline is None:
                        self._failed_in_pipeline = entry.error
                self.note_failure(entry.error)
                return

    def note_failure(self, error: Exception) -> None:
        """A message of the open transaction failed (in the pipeline, or refused where it was
        given, as a message larger than max.request.size): the first such is kept."""
        with self._lock:
            if self._in_transaction and self._failure is None:
                self._failure = error

    # -- the calls, in the order a transaction makes them ----------------------------------

    def init_transactions(self, timeout: float | None = None) -> tuple[int, int]:
        """InitProducerId with the transactional.id (once, before the first transaction): fences
        every earlier producer with the same transactional.id and aborts what it left open. The
        producer id and epoch, which the pipeline numbers its batches under from now on."""
        timeout = self._timeout(timeout)
        producer_id, epoch = self._ask(self.owner.init_transactions.remote(int(timeout * 1000)), timeout)
        self._ask(self.topic_dispatcher.set_producer_id.remote(producer_id, epoch), timeout)
        return producer_id, epoch

    def begin_transaction(self) -> None:
        self._ask(self.owner.begin_transaction.remote(), self.default_timeout)
        with self._lock:
            self._failure = self._failed_in_pipeline = None
            self._in_transaction = self._taking_sends = True

    def send_offsets_to_transaction(self, offsets: Any, group_id: str, timeout: float | None = None, *,
                                    generation_id: int = -1, member_id: str = "",
                                    group_instance_id: str | None = None) -> None:
        """Commit consumer group `group_id`'s `offsets` with the transaction (consume-transform-
        produce): `{(topic, partition): offset}` (or `GroupOffset`), or confluent-kafka
        TopicPartitions carrying offsets. The offsets are those of the next records to read."""
        if not isinstance(group_id, str) or not group_id:
            raise TransactionStateError(f"send_offsets_to_transaction needs a consumer group id, not {group_id!r}")
        timeout = self._timeout(timeout)
        group = {"generation_id": generation_id, "member_id": member_id, "group_instance_id": group_instance_id}
        self._ask(self.owner.send_offsets.remote(group_offsets(offsets), group_id, group, int(timeout * 1000)),
                  timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush: every message sent in the transaction ends; then EndTxn(commit). If one of them
        failed, raises `TransactionAbortableError` (abort, then begin again) or a fatal
        `TransactionFatalError` (`ProducerFencedError`: close the producer); within `timeout`
        (else max.block.ms) or `TransactionTimeoutError`, after which commit may be called again."""
        deadline = time.monotonic() + self._timeout(timeout)
        self._end_sends("commit_transaction", deadline)
        failure = self._failure
        error = None if failure is None else failed_send(
            failure, f"transactional.id {self.transactional_id!r}: a message of the transaction failed")
        left = max(0.001, deadline - time.monotonic())
        try:
            self._ask(self.owner.commit_transaction.remote(error, int(left * 1000)), left)
        except PipelineError as exc:  # the owner died: this transaction cannot commit, the next may
            raise TransactionAbortableError(
                f"transactional.id {self.transactional_id!r}: the transaction cannot commit: {exc}; "
                "abort_transaction() replaces the producer's pipeline") from None
        self._ended()

    def abort_transaction(self, timeout: float | None = None) -> Exception | None:
        """Let every message sent in the transaction end (delivered, or failed), then EndTxn(abort):
        a read_committed reader never sees them. Within `timeout` or `TransactionTimeoutError`.

        Returns the first message of the transaction that failed in the pipeline, if one did
        (known once every message has ended). A numbered batch that failed there for good
        leaves its partition's sequence with a gap, which the broker holds against every later
        batch of this epoch (OUT_OF_ORDER_SEQUENCE_NUMBER), so the Producer then renews its epoch,
        as Java's TransactionManager bumps it after a failed batch (KIP-360). Whether the failed
        message was numbered is not known here (a topic that does not exist fails it before), so
        any such failure renews it."""
        deadline = time.monotonic() + self._timeout(timeout)
        self._end_sends("abort_transaction", deadline)
        failed = self._failed_in_pipeline
        left = max(0.001, deadline - time.monotonic())
        self._ask(self.owner.abort_transaction.remote(int(left * 1000)), left)
        self._ended()
        return failed

    # -- utilities -------------------------------------------------------------------

    def _end_sends(self, call: str, deadline: float) -> None:
        """No more sends in this transaction; wait until every message sent in it has ended."""
        with self._lock:
            self._taking_sends = False
        unresolved = self.flush(max(0.0, deadline - time.monotonic()))
        if unresolved:
            raise TransactionTimeoutError(
                f"transactional.id {self.transactional_id!r}: {call}: {unresolved} message(s) of the transaction "
                f"had not ended in time; call {call}() again (or abort_transaction())")

    def _ended(self) -> None:
        with self._lock:
            self._in_transaction = False
            self._failure = self._failed_in_pipeline = None

    def _timeout(self, timeout: float | None) -> float:
        if timeout is None:
            return self.default_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise TypeError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
        return float(timeout)

    def _ask(self, ref: Any, timeout: float) -> Any:
        """The owner's answer; what it raised, as the named error itself (not Ray's wrapper)."""
        try:
            return ray.get(ref, timeout=timeout + ANSWER_MARGIN)
        except GetTimeoutError:
            raise TransactionTimeoutError(
                f"transactional.id {self.transactional_id!r}: the transaction owner did not answer in "
                f"{timeout + ANSWER_MARGIN:.0f} s") from None
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, KafkaError):
                raise cause from None
            raise pipeline_error(exc) from None


def group_offsets(offsets: Any) -> dict[TopicPartition, GroupOffset]:
    """`offsets` as the owner takes them: a mapping of (topic, partition) to an offset or a
    `GroupOffset`, or objects with `topic`, `partition` and `offset` (confluent-kafka's
    TopicPartition, with `metadata` if it has one)."""
    out: dict[TopicPartition, GroupOffset] = {}
    items: Iterable[tuple[Any, Any]]
    if isinstance(offsets, Mapping):
        items = offsets.items()
    else:
        items = [((tp.topic, tp.partition), GroupOffset(tp.offset, getattr(tp, "metadata", None))) for tp in offsets]
    for key, value in items:
        topic, partition = key
        if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"offsets: expected (topic, partition) keys, got {key!r}")
        offset = value if isinstance(value, GroupOffset) else GroupOffset(value)
        if isinstance(offset.offset, bool) or not isinstance(offset.offset, int) or offset.offset < 0:
            raise TypeError(f"offsets: {topic}/{partition}: expected an offset >= 0, got {offset.offset!r}")
        out[TopicPartition(topic, partition)] = offset
    if not out:
        raise TypeError("offsets: nothing to commit")
    return out

