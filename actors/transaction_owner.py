"""TransactionOwner: one per transactional producer (`transactional.id`), the one owner of its
transaction state. A thin async actor over `TransactionManager` (the state and its legal
transitions) and `TransactionCoordinator` (the requests, their retries and the classification
of their errors as fatal, abortable or retriable), both in wire/transactions.py.

Called by the driver (driver/producer_transactions.py: `init_transactions`, `begin_transaction`,
`send_offsets`, `commit_transaction`, `abort_transaction`) and by every BrokerWorker's Flusher
(`add_partitions`, before its first Produce to a partition in the transaction, as Java's Sender
asks its TransactionManager). Calls the transaction coordinator (FindCoordinator key_type 1,
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and the group coordinator
(TxnOffsetCommit) through a `Cluster` of its own.

Order kept: one coordinator request at a time (Java's one in-flight transactional request): the
calls take a lock, so a broker worker's AddPartitionsToTxn and the driver's EndTxn never overlap, and
partitions added by one caller are found added by the next without a request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from ..wire.admin import TopicPartition
from ..wire.cluster import Cluster
from ..wire.errors import TransactionAbortableError, TransactionError
from ..wire.transactions import GroupOffset, TransactionCoordinator, TransactionManager, TxnState

log = logging.getLogger("raykafka.producer.transactions")


class TransactionOwner:
    def __init__(self, ctx: Any):
        config = ctx.config
        self.cluster = Cluster(config)
        self.manager = TransactionManager(config["transactional.id"], config["transaction.timeout.ms"])
        self.coordinator = TransactionCoordinator(self.cluster, self.manager, timeout_ms=config["max.block.ms"])
        self.default_timeout_ms = config["max.block.ms"]
        self._lock: asyncio.Lock | None = None

    def ping(self) -> bool:
        return True

    def state(self) -> str:
        return self.manager.state.value

    # -- the driver's calls, in the order a transaction makes them -------------------

    async def init_transactions(self, timeout_ms: int | None = None) -> tuple[int, int]:
        """InitProducerId with `transactional.id`: the producer id and epoch every batch carries.
        An earlier producer with the same id is fenced, and what it left open is aborted."""
        async with self._one_request(timeout_ms):
            await self.coordinator.init_transactions()
        return self.manager.producer_id, self.manager.producer_epoch

    async def begin_transaction(self) -> None:
        async with self._one_request(None):
            self.coordinator.begin_transaction()

    async def add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """A BrokerWorker's Flusher is about to produce to `partitions`: AddPartitionsToTxn for those not in the
        transaction yet. Raises why they cannot be written in it (the flusher fails their batches
        with that error): the abortable error the transaction already has, or the fatal one."""
        async with self._one_request(None):
            self._raise_if_abortable()
            await self.coordinator.add_partitions(TopicPartition(t, p) for t, p in partitions)

    async def send_offsets(self, offsets: Mapping[TopicPartition, GroupOffset], group_id: str,
                           group: Mapping[str, Any], timeout_ms: int | None = None) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit: the group's offsets commit with the transaction.
        `group`: generation_id, member_id, group_instance_id of the consumer's group member."""
        async with self._one_request(timeout_ms):
            self._raise_if_abortable()
            await self.coordinator.send_offsets(offsets, group_id, **group)

    async def commit_transaction(self, failure: TransactionError | None, timeout_ms: int | None = None) -> None:
        """EndTxn(commit), once the driver has flushed the transaction's messages. `failure`: the
        first of them that failed (see `wire.transactions.failed_send`): the transaction then
        cannot commit, and this records and raises that error (abortable, or fatal)."""
        async with self._one_request(timeout_ms):
            if failure is not None and self.manager.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                raise self.manager.fail(failure)
            self._raise_if_abortable()
            await self.coordinator.commit_transaction()

    async def abort_transaction(self, timeout_ms: int | None = None) -> None:
        async with self._one_request(timeout_ms):
            await self.coordinator.abort_transaction()

    async def close(self) -> None:
        await self.cluster.close()

    # -- utilities ------------------------------------------------------------------

    @asynccontextmanager
    async def _one_request(self, timeout_ms: int | None) -> AsyncIterator[None]:
        """Hold the lock for one call, its requests bounded by `timeout_ms` (else max.block.ms)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self.coordinator.timeout_ms = self.default_timeout_ms if timeout_ms is None else timeout_ms
            yield

    def _raise_if_abortable(self) -> None:
        """In abortable_error, nothing more goes into the transaction: its cause is raised again."""
        m = self.manager
        if m.state is TxnState.ABORTABLE_ERROR and m.last_error is not None:
            raise TransactionAbortableError(
                f"transactional.id {m.transactional_id!r}: the transaction must be aborted: {m.last_error}",
                m.last_error.code)
