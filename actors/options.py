"""The `ray.remote` options of every producer role, in one place, and the context each actor gets.

Every pipeline actor takes `num_cpus=0` (a dozen of them live on a 2-CPU node), is never
restarted by Ray and never retries a task (`max_restarts=0`, `max_task_retries=0`): a retried
task could run a caller's calls out of order, and order within a partition is what the pipeline
keeps. The producer heals instead: the driver replaces a pipeline an actor died in with a new
one, whole (driver/producer.py, `_heal`), as an actor restarted alone would have lost its state. The
broker worker, which owns broker connections, is an async actor (it numbers its callers' calls
to take them in order, actors/broker_worker.py); the results actor, whose `poll` waits, is a
threaded one; the transaction owner, which awaits its coordinator while broker workers ask it,
is an async one; every other role is a synchronous actor, which runs one caller's calls in the
order they were submitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYNC = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0}
ASYNC = {**SYNC, "max_concurrency": 1000}
THREADED = {**SYNC, "max_concurrency": 8}  # calls in threads: one may wait (a poll) while others run

ROLES: dict[str, dict[str, Any]] = {
    "topic_dispatcher": SYNC,
    "partition_dispatcher": SYNC,
    "leader_dispatcher": SYNC,
    "broker_worker": ASYNC,
    "retry_handler": SYNC,
    "producer_results": THREADED,
    "transaction_owner": ASYNC,
}

# How many calls one stage keeps in flight to each actor downstream (Sarama's ChannelBufferSize
# bounds its channels; Ray's queues are unbounded, so the caller bounds them).
CALLS_IN_FLIGHT = 8


@dataclass
class PipelineContext:
    """What every actor of one producer knows: its config, its name prefix and the shared actors."""

    config: Any  # wire.config.Config
    prefix: str  # every actor of this producer is named prefix + role (+ key)
    results: Any = None  # ProducerResults handle
    retry_handler: Any = None  # RetryHandler handle
    topic_dispatcher: Any = None
    partition_dispatcher: Any = None  # PartitionDispatcher handle: every topic's partitioners
    leader_dispatcher: Any = None  # LeaderDispatcher handle: every partition's state machine
    transactions: Any = None  # TransactionOwner handle, with transactional.id
    producer_id: int = -1
    producer_epoch: int = -1
    window: int = CALLS_IN_FLIGHT

    @property
    def timeout(self) -> float:
        return self.config["request.timeout.ms"] / 1000 + 5


def remote_class(cls: type, role: str) -> Any:
    import ray

    return ray.remote(cls).options(**ROLES[role])


def create(cls: type, role: str, ctx: PipelineContext, key: str = "", *args: Any) -> Any:
    """Start one actor of `role`, named `<prefix><role>[-key]`, with the role's options."""
    import ray

    name = ctx.prefix + role + (f"-{key}" if key else "")
    return ray.remote(cls).options(name=name, **ROLES[role]).remote(ctx, *args)
