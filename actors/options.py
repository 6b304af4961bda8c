"""The `ray.remote` options of every actor and Ray task raykafka starts, in one place, and the
context each producer actor gets.

Called by every module that starts an actor (`create` for the producer's, `remote_class` for the
others: the consumers, the group members, the Spark node writers, the demo's collector); calls Ray.

Every pipeline actor takes `num_cpus=0` (a dozen of them live on a 2-CPU node), is never
restarted by Ray and never retries a task (`max_restarts=0`, `max_task_retries=0`): a retried
task could run a caller's calls out of order, and order within a partition is what the pipeline
keeps. The producer heals instead: the driver replaces a pipeline an actor died in with a new
one, whole (driver/producer_healer.py, `Healer`), as an actor restarted alone would have lost its state. The
broker worker, which owns broker connections, is an async actor (it numbers its callers' calls
to take them in order, actors/broker_worker.py; its `poll` awaits the driver's next outcome);
the transaction owner, which awaits its coordinator while broker workers ask it, is an async
one; every other role is a synchronous actor, which runs one caller's calls in the order they
were submitted. The RetryHandler is one too, with two concurrency groups of one thread each
beside its default thread (`RETRY_HANDLER_GROUPS`): the driver's long `poll`, and
`first_unresolved`, which asks the broker workers; its other calls keep their order.

The consumers' actors: a broker consumer holds no state that its partition consumers cannot give
it again, so Ray restarts it when it dies (a crash, a lost node); each partition consumer watches
the ones its partitions are subscribed to and subscribes them again, at their own positions, when
a watch breaks. A partition consumer is not restarted by Ray (a restarted one would not know where
to start): the driver's `Consumer` replaces a dead one, each of its partitions at the offset after
the last record it handed out. A group member is not restarted either: the `ConsumerGroup`'s
supervisor starts a new one. A Spark node writer is restarted by Ray wherever its placement group
lands (spark_bridge/node_writers.py), its threads given where it is started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

SYNC = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0}
ASYNC = {**SYNC, "max_concurrency": 1000}
# the RetryHandler's methods that run beside its default thread, each group on a thread of its own
POLL_GROUP = "poll"  # `poll`: waits up to the driver's poll timeout
ASK_GROUP = "ask"  # `first_unresolved`: waits for the broker workers' answers
RETRY_HANDLER_GROUPS = {POLL_GROUP: 1, ASK_GROUP: 1}

ROLES: dict[str, dict[str, Any]] = {
    "topic_dispatcher": SYNC,
    "partition_dispatcher": SYNC,
    "leader_dispatcher": SYNC,
    "broker_worker": ASYNC,
    "retry_handler": {**SYNC, "concurrency_groups": RETRY_HANDLER_GROUPS},
    "transaction_owner": ASYNC,
    "broker_consumer": {"num_cpus": 0, "max_concurrency": 1000, "max_restarts": -1, "max_task_retries": 0},
    "partition_consumer": {"num_cpus": 0, "max_concurrency": 1000, "max_restarts": 0, "max_task_retries": 0},
    "group_member": {"num_cpus": 0, "max_concurrency": 4, "max_restarts": 0},
    "node_writer": {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0},
    "demo_collector": {"num_cpus": 0},
}
# raykafka's own Ray tasks (`remote_task`). The read's are generators (streaming ones, Ray's
# default for generators): each yields the Arrow IPC streams Spark's executors read, then a small
# answer, which the caller gets (and so meets the task's error).
TASKS: dict[str, dict[str, Any]] = {
    # read_kafka's read tasks decode records: a CPU each, as Ray Data's read tasks take (so a
    # read waits, as Ray Data's did, while a Spark session's executors hold every CPU)
    "spark_read": {"num_cpus": 1},
    # Arrow tables into IPC streams for Spark: a copy of buffers, short, so no CPU of Ray's
    # (a Spark session's executors may hold every CPU), as RayDP's own fetch tasks take none
    "to_spark": {"num_cpus": 0},
    # write_kafka's fetch of a Spark partition cached by RayDP, as RayDP's own fetch tasks run:
    # retried whatever the failure (the bytes stay cached in Spark), no CPU unless Spark's conf
    # asks (`spark_fetch_options`); the table, then its row count
    "spark_fetch": {"num_cpus": 0, "max_retries": -1, "num_returns": 2},
}
# The one resource a node writer's placement group bundle must hold: a byte of memory, nothing
# anyone misses.
NODE_WRITER_BUNDLE = {"memory": 1}
# options Ray takes in `ray.remote(...)` only, not in `.options(...)`
CLASS_OPTIONS = ("concurrency_groups",)

# How many calls one stage keeps in flight to each actor downstream (Sarama's ChannelBufferSize
# bounds its channels; Ray's queues are unbounded, so the caller bounds them). The
# LeaderDispatcher counts them per partition and keeps what does not fit, without waiting: what
# it keeps is bounded by the driver's buffer.memory, as everything not yet answered is.
CALLS_IN_FLIGHT = 8


@dataclass
class PipelineContext:
    """What every actor of one producer knows: its config, its name prefix and the shared actors."""

    config: Any  # wire.config.Config
    prefix: str  # every actor of this producer is named prefix + role (+ key)
    retry_handler: Any = None  # RetryHandler handle: the outcomes decided before the brokers go there
    topic_dispatcher: Any = None
    partition_dispatcher: Any = None  # PartitionDispatcher handle: every topic's partitioners
    leader_dispatcher: Any = None  # LeaderDispatcher handle: every partition's state machine
    transactions: Any = None  # TransactionOwner handle, with transactional.id
    producer_id: int = -1
    producer_epoch: int = -1
    window: int = CALLS_IN_FLIGHT
    # a Flusher warms Arrow's kernels up as it starts (`record_encoding.prepare_columnar`, ~0.3-0.6 s):
    # worth it in a long-lived actor, not in a terminal command's in-process pipeline
    warm_up: bool = True

    @property
    def timeout(self) -> float:
        return self.config["request.timeout.ms"] / 1000 + 5


def remote_class(cls: type, role: str, **more: Any) -> Any:
    """`cls` as an actor class of `role` with the role's options (and `more`), ready for `.remote`."""
    options = ROLES[role]
    on_class = {k: v for k, v in options.items() if k in CLASS_OPTIONS}
    actor = ray.remote(**on_class)(cls) if on_class else ray.remote(cls)
    return actor.options(**{k: v for k, v in options.items() if k not in CLASS_OPTIONS}, **more)


def remote_task(fn: Any, task: str) -> Any:
    """`fn` as a Ray remote function with the options of `task` (a key of TASKS)."""
    return ray.remote(**TASKS[task])(fn)


def spark_fetch_options(cpus: float, memory: float) -> dict[str, Any]:
    """A Spark partition's fetch task's resources, as RayDP's Spark conf gives them (CPUs, bytes)."""
    return {"num_cpus": cpus, "memory": memory}


def create(cls: type, role: str, ctx: PipelineContext, key: str = "", *args: Any) -> Any:
    """Start one actor of `role`, named `<prefix><role>[-key]`, with the role's options."""
    name = ctx.prefix + role + (f"-{key}" if key else "")
    return remote_class(cls, role, name=name).remote(ctx, *args)
