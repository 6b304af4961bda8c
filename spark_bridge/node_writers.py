"""Write pipelines where the blocks are: a pool of `NodeWriter` actors, one per node or more.

Cardinality: one `WriterPool` per config and size (kept between writes in `POOLS`, as
`producer_cache.PRODUCERS` keeps producers), holding `pipelines_per_node` `NodeWriter`s on every
live node that has CPUs (write tasks run only there). Each `NodeWriter` owns one `Producer`: a
whole Sarama pipeline (dispatchers, a per-broker worker, a retry handler) of
its own. The writer lives in a placement group of its own, STRICT_PACK on its node as a soft
target, and captures its children, so the Producer's actors start on the same node; if the
node is lost, Ray places the group elsewhere and restarts the writer there (`max_restarts=-1`),
with a new pipeline.

Who calls: the driver builds a pool (`WriterPool.start`, through `POOLS`). Then either
- the driver itself (`write_bundles`, for `write_dataset` and `write_kafka`) asks where each
  block is and hands its reference to a writer of that node (`Routes.pick`), at most
  `WRITER_WINDOW` blocks in flight per writer; the writer reads the block from its own node's
  object store, so the driver touches no row; or
- a Ray Data write task (`write_here`, in `KafkaDatasink.write`) hands the blocks it holds to a
  writer of its own node.
Whom it calls: `Producer.send_batch`, once per block; the outcome comes back as a `BlockOutcome`.

Order kept: a block is one `send_batch`, so its rows keep their order within each partition
(per key, with the default partitioner), as a single producer keeps them. Blocks of different
tasks go through different pipelines at once: there is no order across blocks, as Spark's
Kafka sink promises none across tasks. A block sent again after its writer died (at least once)
may repeat rows that had already been delivered.

Exactly once (a pool started with `exactly_once`): writer slot k of the pool has the
transactional id `<prefix>-k` (the config's `transactional.id` as prefix, else a prefix of the
pool's own); its Producer calls `init_transactions` when the writer starts, and again when Ray
restarts it, which fences the attempt that died and aborts the transaction it left open. Each
block is one transaction of its writer (`BlockTransactions`: begin, send_batch, commit; abort if
any row failed, and then every row of the block counts failed), one at a time per writer. A
block whose writer died is sent again to that same writer, once Ray has restarted it, so under
the same transactional id: its rows are committed once. A block sent again with a key the writer
already committed (a Ray Data write task retried while its writer lived on) is answered from the
writer's memory, not written again. The one window left: a writer that dies after its commit and
before its answer reaches the caller; the block is then committed twice.
"""

from __future__ import annotations

import atexit
import logging
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ray
from ray.exceptions import ObjectLostError, RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..actors.options import NODE_WRITER_BUNDLE, remote_class
from ..driver.admin import Admin
from ..driver.producer import Producer
from ..wire.admin import TopicPartition
from ..wire.config import COMMON_KEYS
from ..wire.errors import KafkaError, TransactionFatalError
from .producer_cache import Kept, ProducerCache
from .sink import WriteResult, check_sink_columns, count_causes, sink_table

log = logging.getLogger("raykafka.spark_bridge")

# A writer's calls run in threads: this many blocks go through its producer at once. More only
# contend for its lock: measured, 20 blocks at once cost the writer 2.07 µs of CPU a row, 2 at
# once 0.32 µs. One thread more answers the cheap calls (`where`, `acknowledged`) while the
# blocks' threads are busy (a transactional writer's second block waits for the first).
WRITER_CONCURRENCY = 2
WRITER_THREADS = WRITER_CONCURRENCY + 1
# The driver keeps this many blocks in flight per writer; the rest wait, as references, in order.
WRITER_WINDOW = 2
# A block whose writer died is sent again (to a live writer, or to the one Ray restarted), up to
# this many attempts in all.
WRITE_ATTEMPTS = 3
# How long (s) a write waits for a new or restarted writer to answer before it gives up.
RESTART_WAIT = 120.0
# How many committed block keys a transactional writer remembers (to answer a re-sent block).
COMMITTED_KEYS = 100_000

BlockKey = tuple[str, int, int]  # (write id, task index, block index within the task)


class PoolKind(NamedTuple):
    """A pool's shape, its variant in `POOLS`: writers per node, and whether each is transactional."""

    per_node: int
    exactly_once: bool = False


class BlockOutcome(NamedTuple):
    """How the rows of one block ended, and on which node their pipeline ran."""

    delivered: int
    failed: int
    causes: dict[str, int]  # "ErrorName: message" -> rows
    node_id: str
    first_acked: float | None = None  # time.time() of the first delivery its writer heard of after the block came


class BlockMarker(NamedTuple):
    """Where a block's transaction records that it committed, with the block's rows
    (`send_offsets_to_transaction`): in the consumer group `group` (the writer's transactional
    id, the write and the task), at partition 0 of the block's topic, the offset block index
    + 1. The offset there is then the last block of that task this writer committed."""

    group: str
    partition: TopicPartition
    offset: int

    @classmethod
    def of(cls, transactional_id: str, key: BlockKey, topic: str) -> BlockMarker:
        write_id, task, block = key
        return cls(f"{transactional_id}.{write_id}.{task}", TopicPartition(topic, 0), block + 1)


class BlockTransactions:
    """A transactional writer's blocks, each in a transaction of its own, one at a time; the keys
    of the blocks it committed, so that a block given again is answered, not written again.
    Each transaction also commits the block's marker (`BlockMarker`): a writer restarted after
    dying (`committed_offsets` given) reads the marker of each block it is given, so that the
    block it was writing, if its commit went through before the death, is not written twice.
    Ray-free: `producer` is a `Producer` with `transactional.id`, initialised;
    `committed_offsets(group)` is `Admin.committed_offsets`."""

    def __init__(self, producer: Any, node_id: str, transactional_id: str,
                 committed_offsets: Callable[[str], Mapping[TopicPartition, int]] | None):
        self.producer, self.node_id, self.transactional_id = producer, node_id, transactional_id
        self.committed_offsets = committed_offsets  # None: no earlier incarnation to ask about
        self._lock = threading.Lock()  # one transaction at a time
        self._committed: OrderedDict[BlockKey, BlockOutcome] = OrderedDict()
        self.open_rows = -1  # rows of the block whose transaction is under way; -1 when none is
        self.committing = False  # every row of the open block is in the log; its commit is under way

    def acknowledged(self) -> int:
        """How many rows of the open block's transaction the broker has surely acknowledged (in
        the log, not committed yet): all of them once the block is sent and its commit under way;
        before, those no longer pending (before the block is in the producer's ledger, nothing
        tells them apart, and this says 0); -1 when no transaction is open."""
        rows = self.open_rows
        if rows < 0:
            return -1
        if self.committing:
            return rows
        pending = self.producer.pending()
        return rows - pending if 0 < pending < rows else 0

    def write(self, topic: str | None, table: Any, key: BlockKey | None) -> BlockOutcome:
        if table.num_rows == 0:
            return BlockOutcome(0, 0, {}, self.node_id)
        with self._lock:
            if key is not None and key in self._committed:
                log.info("raykafka/writer: block %s was committed already; not written again", key)
                return self._committed[key]
            marker = None if key is None else BlockMarker.of(self.transactional_id, key, block_topic(topic, table))
            if marker is not None and self.committed_offsets is not None:
                if self.committed_offsets(marker.group).get(marker.partition) == marker.offset:
                    log.info("raykafka/writer: block %s was committed before this writer restarted", key)
                    return BlockOutcome(table.num_rows, 0, {}, self.node_id)
            outcome = self._transaction(topic, table, marker)
            if key is not None and not outcome.failed:
                self._committed[key] = outcome
                while len(self._committed) > COMMITTED_KEYS:
                    self._committed.popitem(last=False)
            return outcome

    def _transaction(self, topic: str | None, table: Any, marker: BlockMarker | None) -> BlockOutcome:
        """begin, send the block, commit; if a row failed, abort: then every row counts failed
        (a fatal error, such as being fenced, is raised: this writer can write no more)."""
        rows, producer = table.num_rows, self.producer
        producer.begin_transaction()
        self.open_rows = rows
        try:
            result = producer.send_batch(topic, table).result()
            if result.failed:
                causes = count_causes(result.errors)
                if result.delivered:
                    causes["aborted with the rest of its block"] = result.delivered
                producer.abort_transaction()
                return BlockOutcome(0, rows, causes, self.node_id)
            self.committing = True
            if marker is not None:
                producer.send_offsets_to_transaction({marker.partition: marker.offset}, marker.group)
            producer.commit_transaction()
            return BlockOutcome(rows, 0, {}, self.node_id)
        except TransactionFatalError:
            raise
        except KafkaError as exc:  # abortable, or timed out: the block's rows are not committed
            try:
                producer.abort_transaction()
            except KafkaError as again:
                log.warning("raykafka/writer: aborting a failed block's transaction: %s", again)
            return BlockOutcome(0, rows, {f"{type(exc).__name__}: {exc}": rows}, self.node_id)
        finally:
            self.open_rows, self.committing = -1, False


class NodeWriter:
    """One per pipeline (so per node, or `pipelines_per_node` per node): owns a `Producer` whose
    actors run on this writer's node. Called by write tasks on the same node, each with whole
    blocks; calls `Producer.send_batch` once per block and waits for its outcome. With
    `transactional.id` in its config, each block is a transaction (`BlockTransactions`), and
    starting (or restarting) fences the writer's earlier incarnation."""

    def __init__(self, config: Mapping[str, Any]):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.producer = Producer(config)
        self.transactions: BlockTransactions | None = None
        self.admin: Any = None  # a restarted transactional writer's, to read its block markers
        if config.get("transactional.id") is not None:
            self.producer.init_transactions()  # fences the incarnation this one replaces, aborts its open block
            committed_offsets = None
            if ray.get_runtime_context().was_current_actor_reconstructed:  # what did the one that died commit?
                self.admin = Admin({k: v for k, v in config.items() if k in COMMON_KEYS - {"statistics.interval.ms"}})
                committed_offsets = self.admin.committed_offsets
            self.transactions = BlockTransactions(self.producer, self.node_id, config["transactional.id"],
                                                  committed_offsets)

    def write(self, topic: str | None, block: Any, rows: tuple[int, int] | None = None,
              key: BlockKey | None = None) -> BlockOutcome:
        """Send `block` (an Arrow table or pandas frame with Kafka sink columns; only its rows
        [start, end) if `rows` is given) and wait until every row of it has ended. `key`: the
        block's identity in its write (transactional writers only answer it once)."""
        table = block_table(block, topic, rows)
        watch = self.producer.metrics.watch_deliveries()  # the first acknowledgement since the block came
        try:
            if self.transactions is not None:
                outcome = self.transactions.write(topic, table, key)
            else:
                result = self.producer.send_batch(topic, table).result()
                outcome = BlockOutcome(result.delivered, result.failed, count_causes(result.errors), self.node_id)
        finally:
            first_acked = self.producer.metrics.first_delivery(watch)
        return outcome._replace(first_acked=first_acked)

    def acknowledged(self) -> int:
        """Rows of the open block's transaction in the log so far; -1 when none is open
        (answered while a write runs)."""
        return -1 if self.transactions is None else self.transactions.acknowledged()

    def where(self) -> tuple[str, str]:
        """This writer's node and its producer's name (whose actors are named `<name>/...`)."""
        return self.node_id, self.producer.name

    def close(self, timeout: float = 30.0) -> None:
        self.producer.close(timeout=timeout)
        if self.admin is not None:
            self.admin.close()


@dataclass(frozen=True)
class Routes:
    """Where a block's writer is found: node id -> writer handles (read by the driver and by
    write tasks)."""

    writers: Mapping[str, tuple[Any, ...]]

    def pick(self, node_id: str, task_index: int, avoid: Iterable[Any] = ()) -> Any:
        """A writer on `node_id`, spread by task, other than those to `avoid` (seen dying); a
        node without one of its own (it joined after the pool was built, or the block's place is
        unknown) borrows another node's."""
        avoid = set(avoid)
        local = [w for w in self.writers.get(node_id, ()) if w not in avoid]
        if local:
            return local[task_index % len(local)]
        every = [w for _, ws in sorted(self.writers.items()) for w in ws]
        alive = [w for w in every if w not in avoid] or every
        log.info("raykafka/writer: no writer of node %s to take a block; it goes to another node's", node_id or "?")
        return alive[task_index % len(alive)]


@dataclass
class WriterPool:
    """The writers of one config, `per_node` on each live node with CPUs, started by the driver."""

    config: dict[str, Any]
    per_node: int
    exactly_once: bool = False
    writers: dict[str, list[Any]] = field(default_factory=dict)
    groups: list[Any] = field(default_factory=list)  # the placement groups, one per writer
    # exactly once: writer slot k's transactional id is f"{prefix}-{k}"
    prefix: str = field(default_factory=lambda: f"raykafka-write-{uuid.uuid4().hex[:12]}")

    @classmethod
    def start(cls, config: Mapping[str, Any], per_node: int = 1, exactly_once: bool = False) -> WriterPool:
        config = dict(config)
        prefix = config.pop("transactional.id", None)
        pool = cls(config, per_node, exactly_once)
        if prefix is not None:
            pool.prefix = prefix
        try:
            pool.cover_nodes()
        except BaseException:
            pool.close()
            raise
        return pool

    def cover_nodes(self) -> None:
        """Start writers on every live node with CPUs that has none yet, and wait until all answer
        (a writer that cannot start, say no broker reachable, raises here, in the driver)."""
        started = []
        for node_id in write_nodes():
            if node_id in self.writers:
                continue
            for _ in range(self.per_node):
                group = placement_group([NODE_WRITER_BUNDLE], strategy="STRICT_PACK", _soft_target_node_id=node_id)
                self.groups.append(group)
                strategy = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
                writer = remote_class(NodeWriter, "node_writer", max_concurrency=WRITER_THREADS,
                                      scheduling_strategy=strategy).remote(self.writer_config(len(self.groups) - 1))
                self.writers.setdefault(node_id, []).append(writer)
                started.append(writer)
        if started:  # bounded: a writer that cannot be placed or started fails the write here
            ray.get([w.where.remote() for w in started], timeout=RESTART_WAIT)

    def writer_config(self, slot: int) -> dict[str, Any]:
        """Writer slot `slot`'s config: with exactly once, its own transactional id."""
        if not self.exactly_once:
            return self.config
        return {**self.config, "transactional.id": f"{self.prefix}-{slot}"}

    def routes(self) -> Routes:
        return Routes({node: tuple(ws) for node, ws in self.writers.items()})

    def handles(self) -> list[Any]:
        return [w for ws in self.writers.values() for w in ws]

    def alive(self) -> bool:
        """Whether every writer still answers (Ray may have been restarted under the pool)."""
        if not self.writers or not ray.is_initialized():
            return False
        try:
            ray.get([w.where.remote() for w in self.handles()], timeout=30)
            return True
        except Exception:
            return False

    def close(self) -> None:
        """Close every writer's producer (delivering what it holds), then stop the writers and
        free their placement groups."""
        if not ray.is_initialized():
            return  # the actors went with Ray
        handles = self.handles()
        try:
            ray.get([w.close.remote() for w in handles], timeout=60)
        except Exception as exc:  # a writer died: its pipeline went with it
            log.warning("raykafka/writer: closing a pool: %s", exc)
        for writer in handles:
            try:
                ray.kill(writer, no_restart=True)
            except Exception as exc:  # gone with a Ray shut down and started again under the pool
                log.debug("raykafka/writer: killing a writer: %s", exc)
        for group in self.groups:
            try:
                remove_placement_group(group)
            except Exception as exc:
                log.debug("raykafka/writer: removing a placement group: %s", exc)
        self.writers, self.groups = {}, []


def block_table(block: Any, topic: str | None, rows: tuple[int, int] | None) -> Any:
    """What a writer sends of `block`: its Kafka sink columns (`sink_table`), only the rows
    [start, end) of `rows` if given."""
    table = sink_table(block, topic)
    return table if rows is None else table.slice(rows[0], rows[1] - rows[0])


def block_topic(topic: str | None, table: Any) -> str:
    """The block's topic: the write's, else its first row's (`topic` column)."""
    if topic is not None:
        return topic
    first = table.column("topic")[0].as_py()
    return first.decode() if isinstance(first, bytes) else first


def write_nodes() -> list[str]:
    """The live nodes where Ray may run a write task (those with CPUs)."""
    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)


def write_here(routes: Routes, topic: str | None, block: Any, task_index: int,
               key: BlockKey | None = None) -> BlockOutcome:
    """Inside a write task: hand `block` to a writer on this task's node and return its outcome.

    If the writer dies meanwhile (its node was lost, or its process), the block is sent again to
    the writer Ray restarts (its calls wait while it restarts, up to `RESTART_WAIT` s), up to
    `WRITE_ATTEMPTS` times in all: at least once, so rows delivered before the death may be
    delivered twice, unless the writer is transactional (its restart aborted them). `key`: the
    block's identity in its write, for a transactional writer."""
    writer = routes.pick(ray.get_runtime_context().get_node_id(), task_index)
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return ray.get(writer.write.remote(topic, block, None, key))
        except RayActorError as exc:
            if attempt == WRITE_ATTEMPTS:
                raise
            log.warning("raykafka/writer: a writer died with a block (%s); sending it again, attempt %d",
                        exc, attempt + 1)
            where(writer, RESTART_WAIT)  # back, on this node or another
    raise AssertionError("unreachable")


def where(writer: Any, timeout: float) -> tuple[str, str]:
    """`writer`'s node and producer name, once it answers: a call to a writer Ray is restarting
    waits for the restart (it is retried until then), up to `timeout` s."""
    return ray.get(writer.where.options(max_task_retries=-1).remote(), timeout=timeout)


class BlockRef(NamedTuple):
    """A block in Ray's object store, as the driver hands it to a writer: its reference, the
    slice of it to write ([start, end); None for all of it), and its rows (to count them failed
    if the block is lost)."""

    ref: Any
    rows: tuple[int, int] | None
    count: int


def blocks_of(bundles: Iterable[Any]) -> Iterator[BlockRef]:
    """The blocks of Ray Data `RefBundle`s (as a Dataset yields them), each bundle's columns
    checked first (the input's mistake is raised before its blocks go)."""
    for bundle in bundles:
        if bundle.schema is not None and hasattr(bundle.schema, "names"):
            check_sink_columns(list(bundle.schema.names))
        for entry, part in zip(bundle.blocks, bundle.slices, strict=True):
            rows = None if part is None else (part.start_offset, part.end_offset)
            count = entry.metadata.num_rows if part is None else part.end_offset - part.start_offset
            yield BlockRef(entry.ref, rows, count or 0)


class _Sent(NamedTuple):
    """A block handed to a writer by the driver, kept until its outcome is in."""

    block: Any  # ObjectRef of the block
    rows: tuple[int, int] | None  # the slice of it to write, [start, end); None for all of it
    count: int  # its rows, for counting them failed if the block is lost
    index: int
    attempt: int


def write_bundles(routes: Routes, topic: str | None, bundles: Iterable[Any],
                  on_outcome: Callable[[BlockOutcome], None] | None = None,
                  exactly_once: bool = False) -> WriteResult:
    """`write_refs` of the blocks of `bundles` (Ray Data `RefBundle`s, as a Dataset yields them)."""
    return write_refs(routes, topic, blocks_of(bundles), on_outcome, exactly_once)


def write_refs(routes: Routes, topic: str | None, blocks: Iterable[BlockRef],
               on_outcome: Callable[[BlockOutcome], None] | None = None,
               exactly_once: bool = False) -> WriteResult:
    """On the driver: hand each block by reference, as `blocks` yields it, to a writer on the
    node that holds it, and gather the outcomes (those in by then are gathered between blocks).

    The driver touches no row: per block it asks where the block is and makes one actor call.
    A block whose writer died is sent again, to a writer of wherever the block is then, up to
    `WRITE_ATTEMPTS` times in all (at least once: rows delivered before the death may be
    delivered twice); a block Ray lost and could not rebuild counts its rows failed, naming
    the cause. The input's own mistake (a column that is no Kafka sink column) is raised.

    `exactly_once` (the routes' writers are transactional): a block whose writer died goes
    again to that same writer once Ray has restarted it, so under the same transactional id,
    whose new `init_transactions` aborted what the death left open."""
    result = WriteResult()
    pending: dict[Any, tuple[Any, _Sent]] = {}  # outcome ref -> (writer, block)
    waiting: dict[Any, deque[_Sent]] = {}  # writer -> blocks for it beyond its window, in order
    busy: dict[Any, int] = {}  # writer -> blocks in flight
    dying: set[Any] = set()  # writers whose last call failed: no block goes to them until one answers
    write_id = uuid.uuid4().hex

    def send(sent: _Sent) -> None:
        """To a writer of the node that holds the block (one that is not dying)."""
        where = ray.experimental.get_object_locations([sent.block]).get(sent.block, {}).get("node_ids") or [""]
        submit(routes.pick(where[0], sent.index, avoid=dying), sent)

    def submit(writer: Any, sent: _Sent) -> None:
        """Now, or after the blocks in flight to `writer` (a writer with blocks waiting always
        has some in flight, whose ends send the next)."""
        if busy.get(writer, 0) >= WRITER_WINDOW:
            waiting.setdefault(writer, deque()).append(sent)
            return
        busy[writer] = busy.get(writer, 0) + 1
        key = (write_id, 0, sent.index) if exactly_once else None
        pending[writer.write.remote(topic, sent.block, sent.rows, key)] = (writer, sent)

    def settle(ready: list[Any]) -> None:
        for ref in ready:
            writer, sent = pending.pop(ref)
            busy[writer] -= 1
            again = []
            try:
                outcome = ray.get(ref)
            except ObjectLostError as exc:  # the block went with its node and could not be rebuilt
                result.add_outcome(BlockOutcome(0, sent.count, {f"{type(exc).__name__}: {exc}": sent.count}, ""))
            except RayActorError as exc:
                if sent.attempt >= WRITE_ATTEMPTS:
                    raise
                log.warning("raykafka/writer: a writer died with block %d (%s); sending it again", sent.index, exc)
                if exactly_once:  # to the same writer, restarted: same transactional id, its old attempt aborted
                    where(writer, RESTART_WAIT)
                    submit(writer, sent._replace(attempt=sent.attempt + 1))
                else:
                    dying.add(writer)
                    again.append(sent._replace(attempt=sent.attempt + 1))
            else:
                dying.discard(writer)
                result.add_outcome(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
            backlog = waiting.pop(writer, deque())
            if writer in dying:  # what waited for it goes elsewhere too
                again.extend(backlog)
            elif backlog:
                submit(writer, backlog.popleft())
                if backlog:
                    waiting[writer] = deque([*waiting.get(writer, ()), *backlog])
            for block in again:
                send(block)

    for index, block in enumerate(blocks):
        send(_Sent(block.ref, block.rows, block.count, index, 1))
        if pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            settle(done)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        settle(done)
    if waiting:  # the invariant above was broken: say so rather than lose the blocks
        raise AssertionError(f"blocks left waiting with none in flight: {sum(map(len, waiting.values()))}")
    return result


class _Pools:
    """The `ProducerCache` hooks for writer pools."""

    @staticmethod
    def open(config: Mapping[str, Any], kind: Any) -> WriterPool:
        """`kind`: a `PoolKind`, or just the writers per node."""
        kind = kind if isinstance(kind, PoolKind) else PoolKind(kind or 1)
        return WriterPool.start(config, kind.per_node, kind.exactly_once)

    @staticmethod
    def alive(pool: WriterPool) -> bool:
        return pool.alive()

    @staticmethod
    def close(pool: WriterPool) -> None:
        pool.close()


def _make_cache() -> Any:
    cache = ProducerCache(kept=Kept(_Pools.open, _Pools.alive, _Pools.close))
    atexit.register(cache.close_all)
    return cache


POOLS = _make_cache()
