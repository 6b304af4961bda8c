"""A scripted, stateful mock Kafka cluster for fault scenarios a single real broker cannot produce.

`MockCluster` (one per test) owns `n_brokers` `MockBroker`s (ids 1..n) and the state they share:
topics, partitions with their leader and log, producer ids and sequences, consumer groups and
committed offsets. Each `MockBroker` is a real TCP server on 127.0.0.1 with a kernel-chosen
port, serving on its own asyncio loop in a daemon thread, so test code, client loops and Ray
actor processes all reach it over TCP like any broker.

A connection is served the way Kafka serves one: one request at a time, in order. A request is
read, logged (`requests(api_key)`), then, in this order: a scheduled drop closes the connection
(the request applied or not, as asked); a handler answers it (a scripted one from `set_handler`,
else the default stateful one); a scheduled delay holds the answer; the answer is written. A
request with neither a scripted nor a default handler gets no answer, so a test fails loudly.

Fault controls are thread-safe and callable from the test's thread; every fault actually
injected is counted in `cluster.faults` (kind → count), for chaos reports to quote.

Like Sarama's MockBroker, but stateful: Produce appends to a log only on the leader and assigns
offsets, Fetch reads it back, leaders move on command. Idempotent producers are checked as Kafka
checks them: the broker remembers the last 5 batches per producer and partition, a re-sent batch
among them is answered DUPLICATE_SEQUENCE_NUMBER (with its offset, not written again), and any
other batch whose first sequence is not the next expected one (a gap, or a re-sent batch older
than the last 5) OUT_OF_ORDER_SEQUENCE_NUMBER.

Transactions, as a partition's log shows them: a transactional producer's batches go in by
Produce, and `end_transaction` writes the marker its coordinator would (commit or abort). From
the log, Fetch answers each partition's last stable offset (the first offset of the earliest
transaction still open), serves a read_committed fetch only below it, and lists the aborted
transactions that overlap the fetched range (`list_aborted=False` lists none, as tansu 0.6.0).

Configs and records: a topic keeps the configs it was created with; DescribeConfigs lists them
(and a broker's few static configs, asked of that broker), AlterConfigs replaces them,
IncrementalAlterConfigs sets, deletes, appends to or subtracts from single keys. DeleteRecords
moves a partition's log start up on its leader, and Fetch and ListOffsets from the earliest
start there (the batches stay: a fetch below the log start is OFFSET_OUT_OF_RANGE).

Not modelled: replication (a moved leader keeps the one shared log), fetch sessions (every
Fetch answers session_id 0, which a client must take as "no session"), the transaction
coordinator (AddPartitionsToTxn, EndTxn: tests write the markers), topic
auto-creation, group session expiry, and the initial rebalance delay. A stopped broker stays
in Metadata, and leadership does not move off it unless a test moves it.
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import logging
import struct
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..wire import messages
from ..wire.errors import DecodeError, code_for
from ..wire.protocol import Api, Struct, decode_request, encode_response
from ..wire.record_batch import Record
from ..wire.record_decoding import decode_record_batches
from ..wire.record_encoding import encode_control_batch

log = logging.getLogger("raykafka.mock")

T = TypeVar("T")

Handler = Callable[[int, Struct, "MockBroker"], Any]
"""(version, request body, broker) -> response dict, None for no answer, or an awaitable of either."""

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
MEMBER_ID_REQUIRED = 79
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100
INVALID_REQUEST = 42
INVALID_CONFIG = 40

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # config resource types
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG = 1, 4  # DescribeConfigs' config_source
CONFIG_SET, CONFIG_DELETE, CONFIG_APPEND, CONFIG_SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
DEFAULT_MESSAGE_MAX_BYTES = 1048588  # Kafka's message.max.bytes default
END_OFFSET = -1  # DeleteRecords' offset for "the high watermark"


def _key(api: Api | int) -> int:
    return api.key if isinstance(api, Api) else int(api)


def _api_name(key: int) -> str:
    api = messages.APIS.get(key)
    return api.name if api else f"api{key}"


# ---------------------------------------------------------------------------
# Shared state


# Kafka's broker keeps the metadata of this many batches per producer and partition
# (ProducerStateEntry.NUM_BATCHES_TO_RETAIN): a re-sent batch among them is a duplicate, an older one
# is out of order.
BATCHES_TO_RETAIN = 5


@dataclass(frozen=True)
class _BatchMetadata:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass
class _ProducerState:
    """Per (producer id, partition): the epoch, the next expected sequence, and the last
    `BATCHES_TO_RETAIN` batches written, as Kafka keeps them."""

    epoch: int
    next_sequence: int = 0
    written: deque[_BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    def duplicate_of(self, first_sequence: int, last_sequence: int) -> _BatchMetadata | None:
        """The retained batch with exactly these sequences (a re-sent batch), if any."""
        for kept in self.written:
            if (kept.first_sequence, kept.last_sequence) == (first_sequence, last_sequence):
                return kept
        return None

    def appended(self, first_sequence: int, count: int, base_offset: int) -> None:
        last = (first_sequence + count - 1) & 0x7FFFFFFF
        self.written.append(_BatchMetadata(first_sequence, last, base_offset))
        self.next_sequence = (last + 1) & 0x7FFFFFFF


@dataclass
class PartitionState:
    """One partition: its leader and its log of record batches (base offsets already assigned)."""

    leader: int
    leader_epoch: int = 0
    batches: list[bytes] = field(default_factory=list)
    next_offsets: list[int] = field(default_factory=list)  # next_offsets[i]: offset after batch i
    log_start_offset: int = 0
    producers: dict[int, _ProducerState] = field(default_factory=dict)
    _transactions: tuple[int, Any] | None = None  # (batches read, what `transactions` found)

    @property
    def high_watermark(self) -> int:
        return self.next_offsets[-1] if self.next_offsets else self.log_start_offset

    def transactions(self) -> tuple[int, list[tuple[int, int, int]]]:
        """From the log: the last stable offset, and every aborted transaction as (producer id,
        first offset, its marker's offset). Read again only when the log has grown."""
        if self._transactions is not None and self._transactions[0] == len(self.batches):
            return self._transactions[1]
        open_at: dict[int, int] = {}
        aborted: list[tuple[int, int, int]] = []
        for raw in self.batches:
            (batch,) = decode_record_batches(raw, check_crc=False)
            if not batch.is_transactional:
                continue
            if batch.is_control:
                first = open_at.pop(batch.producer_id, None)
                if first is not None and batch.is_abort_marker:
                    aborted.append((batch.producer_id, first, batch.base_offset))
            else:
                open_at.setdefault(batch.producer_id, batch.base_offset)
        found = min(open_at.values(), default=self.high_watermark), aborted
        self._transactions = (len(self.batches), found)
        return found


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # its dynamic configs: what DescribeConfigs lists


@dataclass
class _FailRule:
    api_key: int
    error_code: int
    remaining: int
    node_id: int | None
    topic: str | None
    partition: int | None

    def matches(self, api_key: int, node_id: int, topic: str | None, partition: int | None) -> bool:
        return (self.api_key == api_key and self.node_id in (None, node_id)
                and self.topic in (None, topic) and self.partition in (None, partition))


@dataclass
class _DropRule:
    api_key: int
    remaining: int
    node_id: int | None
    apply: bool


@dataclass
class _Member:
    member_id: str
    group_instance_id: str | None
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    joined: asyncio.Future | None = None  # set while its JoinGroup waits for the round to finish
    synced: asyncio.Future | None = None  # set while its SyncGroup waits for the leader's
    assignment: bytes = b""


@dataclass
class _Group:
    """A classic group on the coordinator: Empty → PreparingRebalance → CompletingRebalance → Stable."""

    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    joined_this_round: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED, not yet used
    round_deadline: asyncio.TimerHandle | None = None
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# One broker


class MockBroker:
    """One mock broker: a TCP listener on 127.0.0.1 and the loop thread that serves it."""

    def __init__(self, node_id: int, cluster: MockCluster, port: int = 0):
        self.node_id = node_id
        self.cluster = cluster
        self.port = port
        self.handlers: dict[int, Handler] = {}
        self._log: list[tuple[int, int, Struct]] = []  # (api key, version, body), in arrival order
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.changed = asyncio.Event()  # set, then replaced, when any log grows or a leader moves
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"mock-broker-{node_id}", daemon=True)
        self._thread.start()
        self.start()

    def __repr__(self) -> str:
        return f"MockBroker({self.node_id}, {self.address})"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def requests(self, api_key: Api | int) -> list[Struct]:
        """The decoded bodies of the requests of this kind this broker received, in order."""
        key = _key(api_key)
        with self.cluster.lock:
            return [body for k, _v, body in self._log if k == key]

    def request_versions(self, api_key: Api | int) -> list[int]:
        key = _key(api_key)
        with self.cluster.lock:
            return [v for k, v, _body in self._log if k == key]

    def set_handler(self, api_key: Api | int, fn: Handler | None) -> None:
        """Script this broker's answers to one kind of request (None: back to the cluster's)."""
        with self.cluster.lock:
            if fn is None:
                self.handlers.pop(_key(api_key), None)
            else:
                self.handlers[_key(api_key)] = fn

    def wake(self) -> None:
        """On this broker's loop: release the Fetches waiting for a change."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Listen (again) on this broker's port; the first start lets the kernel choose it."""
        if not self.running:
            self._call(self._start())

    def stop(self) -> None:
        """Close the listener and every open connection; state and port are kept for `start`."""
        if self.running:
            self._call(self._stop())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:  # from a handler: cannot wait for ourselves
            self.loop.create_task(coro)
            return None  # type: ignore[return-value]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    # -- serving -----------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if not await self._handle_frame(frame, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("mock broker %d: serving a connection failed", self.node_id)
            self.cluster.handler_errors.append(f"broker {self.node_id}: connection failed")
        finally:
            self._connections.discard(task)
            self._writers.discard(writer)
            writer.transport.abort()

    async def _handle_frame(self, frame: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False closes the connection."""
        cluster = self.cluster
        key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        api = messages.APIS.get(key)
        if api is not None and key == messages.API_VERSIONS.key and version not in api.request.versions:
            # a version we do not know: answer in v0 with what we speak, as Kafka does
            self._record(key, version, Struct())
            writer.write(encode_response(api, 0, correlation_id, cluster._api_versions_body(UNSUPPORTED_VERSION)))
            return True
        try:
            api, version, correlation_id, _client_id, body = decode_request(frame, messages.APIS)
        except DecodeError as exc:
            log.warning("mock broker %d: undecodable request (%s); closing the connection", self.node_id, exc)
            cluster.handler_errors.append(f"broker {self.node_id}: undecodable request: {exc}")
            return False
        self._record(api.key, version, body)

        drop = cluster._take_drop(api.key, self.node_id)
        if drop is not None and not drop.apply:
            return False
        handler = self._handler_for(api.key)
        if handler is None:
            log.warning("mock broker %d: no handler for %s v%d; not answering", self.node_id, api.name, version)
            return True
        try:
            response = handler(version, body, self)
            if inspect.isawaitable(response):
                response = await response
        except Exception as exc:
            log.exception("mock broker %d: handler for %s failed", self.node_id, api.name)
            cluster.handler_errors.append(f"broker {self.node_id}: {api.name} handler failed: {exc!r}")
            return False
        if drop is not None:
            return False  # applied, never answered
        if response is None:
            return True
        seconds = cluster._delay_for(api.key, self.node_id)
        if seconds > 0:
            await asyncio.sleep(seconds)
        try:
            out = encode_response(api, version, correlation_id, response)
        except (TypeError, ValueError) as exc:
            log.error("mock broker %d: cannot encode the %s v%d response: %s", self.node_id, api.name, version, exc)
            cluster.handler_errors.append(f"broker {self.node_id}: bad {api.name} response: {exc}")
            return False
        writer.write(out)
        await writer.drain()
        return True

    def _record(self, key: int, version: int, body: Struct) -> None:
        with self.cluster.lock:
            self._log.append((key, version, body))
            self.cluster._log.append((self.node_id, key, version, body))
            self.cluster._arrived.notify_all()

    def _handler_for(self, key: int) -> Handler | None:
        with self.cluster.lock:
            return self.handlers.get(key) or self.cluster.handlers.get(key) or self.cluster.default_handlers.get(key)


# ---------------------------------------------------------------------------
# The cluster


class MockCluster:
    """Brokers 1..n_brokers over one shared state; the fault controls; the default handlers.

    `topics` maps a name to its partition count; partition p starts led by broker p % n + 1.
    `max_versions` caps what ApiVersions advertises per api key (default: every version declared
    in `messages`, which matches what tansu speaks). `coordinator_id` is the broker that answers
    FindCoordinator and hosts every group. `message_max_bytes`, as Kafka's `message.max.bytes`,
    refuses a larger record batch with MESSAGE_TOO_LARGE. `duplicate_offset_unknown` answers a
    re-sent batch DUPLICATE_SEQUENCE_NUMBER with base offset -1, as tansu 0.6 does.
    `cut_batches` serves a partition's records cut at the fetch's size limits, even inside the
    first batch, as a broker before KIP-74 does (else at least the first batch comes whole).
    `list_aborted=False` answers Fetch with no aborted transactions, as tansu 0.6.0 does.
    """

    def __init__(self, n_brokers: int = 3, topics: dict[str, int] | None = None, *,
                 max_versions: dict[Api | int, int] | None = None, coordinator_id: int = 1,
                 message_max_bytes: int | None = None, duplicate_offset_unknown: bool = False,
                 cut_batches: bool = False, list_aborted: bool = True):
        self.lock = threading.RLock()
        self.cut_batches = cut_batches
        self.list_aborted = list_aborted
        # a duplicate answered with base offset -1 (as tansu 0.6 answers it), not with its offset
        self.duplicate_offset_unknown = duplicate_offset_unknown
        self.message_max_bytes = message_max_bytes  # a larger record batch: MESSAGE_TOO_LARGE, as Kafka's
        self._arrived = threading.Condition(self.lock)  # notified on every request read
        self.faults: Counter[str] = Counter()
        self.handler_errors: list[str] = []
        self.topics: dict[str, TopicState] = {}
        self.handlers: dict[int, Handler] = {}
        self.coordinator_id = coordinator_id
        self.cluster_id = "mock-cluster"
        # every broker's static configs, as DescribeConfigs of a broker lists them
        self.broker_configs: dict[str, str] = {
            "message.max.bytes": str(message_max_bytes or DEFAULT_MESSAGE_MAX_BYTES), "num.partitions": "1"}
        self.versions: dict[int, tuple[int, int]] = {
            api.key: (api.min_version, api.max_version) for api in messages.APIS.values()}
        for api, high in (max_versions or {}).items():
            low, _ = self.versions[_key(api)]
            self.versions[_key(api)] = (low, high)
        self._log: list[tuple[int, int, int, Struct]] = []
        self._fail_rules: list[_FailRule] = []
        self._drop_rules: list[_DropRule] = []
        self._delays: dict[tuple[int, int | None], float] = {}
        self._next_producer_id = 1000
        self._groups: dict[str, _Group] = {}
        self._member_counter = 0
        self.default_handlers: dict[int, Handler] = {
            messages.API_VERSIONS.key: self._handle_api_versions,
            messages.METADATA.key: self._handle_metadata,
            messages.PRODUCE.key: self._handle_produce,
            messages.FETCH.key: self._handle_fetch,
            messages.LIST_OFFSETS.key: self._handle_list_offsets,
            messages.FIND_COORDINATOR.key: self._handle_find_coordinator,
            messages.INIT_PRODUCER_ID.key: self._handle_init_producer_id,
            messages.CREATE_TOPICS.key: self._handle_create_topics,
            messages.JOIN_GROUP.key: self._handle_join_group,
            messages.SYNC_GROUP.key: self._handle_sync_group,
            messages.HEARTBEAT.key: self._handle_heartbeat,
            messages.LEAVE_GROUP.key: self._handle_leave_group,
            messages.OFFSET_COMMIT.key: self._handle_offset_commit,
            messages.OFFSET_FETCH.key: self._handle_offset_fetch,
            messages.DESCRIBE_CONFIGS.key: self._handle_describe_configs,
            messages.ALTER_CONFIGS.key: self._handle_alter_configs,
            messages.INCREMENTAL_ALTER_CONFIGS.key: self._handle_incremental_alter_configs,
            messages.DELETE_RECORDS.key: self._handle_delete_records,
        }
        self.brokers: dict[int, MockBroker] = {}
        try:
            for node_id in range(1, n_brokers + 1):
                self.brokers[node_id] = MockBroker(node_id, self)
            for name, count in (topics if topics is not None else {"t": 4}).items():
                self.create_topic(name, count)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    # -- state for tests ---------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        n = len(self.brokers)
        with self.lock:
            if name in self.topics:
                raise ValueError(f"topic {name!r} exists")
            self.topics[name] = TopicState(name, uuid.uuid4(),
                                           [PartitionState(leader=p % n + 1) for p in range(partitions)])

    def delete_topic(self, name: str) -> None:
        """The topic and its log are gone: Metadata no longer lists it."""
        with self.lock:
            if name not in self.topics:
                raise ValueError(f"topic {name!r} does not exist")
            del self.topics[name]

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id, which Fetch v13+ names topics by."""
        with self.lock:
            return self.topics[topic].topic_id

    def leader(self, topic: str, partition: int) -> int:
        with self.lock:
            return self._partition_or_raise(topic, partition).leader

    def high_watermark(self, topic: str, partition: int) -> int:
        with self.lock:
            return self._partition_or_raise(topic, partition).high_watermark

    def end_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                        commit: bool) -> int:
        """Write the marker that ends `producer_id`'s transaction on the partition, as its
        transaction coordinator would; its offset."""
        with self.lock:
            p = self._partition_or_raise(topic, partition)
            offset = p.high_watermark
            p.batches.append(encode_control_batch(commit, producer_id, producer_epoch, base_offset=offset))
            p.next_offsets.append(offset + 1)
            self._notify_change()
            return offset

    def records(self, topic: str, partition: int) -> list[Record]:
        """Every record in the partition's log, with the offsets the leader assigned."""
        with self.lock:
            batches = list(self._partition_or_raise(topic, partition).batches)
        return [r for raw in batches for batch in decode_record_batches(raw) for r in batch.records]

    def requests(self, api_key: Api | int, node_id: int | None = None) -> list[Struct]:
        """Decoded request bodies of this kind, in arrival order, on every broker or on one."""
        key = _key(api_key)
        with self.lock:
            return [body for n, k, _v, body in self._log if k == key and node_id in (None, n)]

    def wait_for_requests(self, api_key: Api | int, count: int, timeout: float = 10.0,
                          node_id: int | None = None) -> list[Struct]:
        """Block until `count` requests of this kind have arrived; raise `TimeoutError` after `timeout`.

        It blocks the calling thread: from async code run it with `asyncio.to_thread`.
        """
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests(api_key, node_id)) >= count, timeout):
                got = len(self.requests(api_key, node_id))
                raise TimeoutError(f"{got} {_api_name(_key(api_key))} requests arrived in {timeout}s, not {count}")
            return self.requests(api_key, node_id)

    def _partition_or_raise(self, topic: str, partition: int) -> PartitionState:
        p = self._partition(topic, partition)
        if p is None:
            raise KeyError(f"no partition {topic}/{partition}")
        return p

    def _partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    # -- fault controls ----------------------------------------------------

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        """Make `node_id` the partition's leader (the leader epoch goes up, the log stays)."""
        if node_id not in self.brokers:
            raise ValueError(f"no broker {node_id}")
        with self.lock:
            p = self._partition_or_raise(topic, partition)
            p.leader = node_id
            p.leader_epoch += 1
            self.faults["leader_move"] += 1
        self._notify_change()

    def fail_next(self, api_key: Api | int, error_code: int, count: int = 1, *, node_id: int | None = None,
                  topic: str | None = None, partition: int | None = None) -> None:
        """The next `count` matching answers carry `error_code` instead of being processed.

        Partition-level for Produce, Fetch, ListOffsets, OffsetCommit and OffsetFetch; topic-level
        for Metadata and CreateTopics; the whole answer's error code for every other API.
        """
        with self.lock:
            self._fail_rules.append(_FailRule(_key(api_key), error_code, count, node_id, topic, partition))

    def drop_after_request(self, api_key: Api | int, count: int = 1, node_id: int | None = None, *,
                           apply: bool = False) -> None:
        """Close the connection right after reading the next `count` such requests, unanswered.

        With `apply=True` the request is processed first (a Produce is appended), so the client
        cannot tell whether it was: the case a retry with idempotence exists for.
        """
        with self.lock:
            self._drop_rules.append(_DropRule(_key(api_key), count, node_id, apply))

    def set_handler(self, api_key: Api | int, fn: Handler | None, node_id: int | None = None) -> None:
        """Script the answers to one kind of request; fn(version, body, broker) returns the
        response dict (or None for no answer, or an awaitable of either). None: back to the default.

        A script can wrap the default: `broker.cluster.default_handlers[key](version, body, broker)`.
        """
        if node_id is not None:
            self.brokers[node_id].set_handler(api_key, fn)
            return
        with self.lock:
            if fn is None:
                self.handlers.pop(_key(api_key), None)
            else:
                self.handlers[_key(api_key)] = fn

    def delay(self, api_key: Api | int, seconds: float, node_id: int | None = None) -> None:
        """Hold every answer of this kind `seconds` after processing it (0 removes the delay)."""
        with self.lock:
            if seconds > 0:
                self._delays[(_key(api_key), node_id)] = seconds
            else:
                self._delays.pop((_key(api_key), node_id), None)

    def stop_broker(self, node_id: int) -> None:
        """Close the broker's listener and its connections (leadership does not move by itself)."""
        self.brokers[node_id].stop()
        with self.lock:
            self.faults["broker_stop"] += 1

    def start_broker(self, node_id: int) -> None:
        """Listen again on the same port."""
        self.brokers[node_id].start()

    def _notify_change(self) -> None:
        """A log grew or a leader moved: wake every waiting Fetch to look again."""
        for broker in self.brokers.values():
            try:
                broker.loop.call_soon_threadsafe(broker.wake)
            except RuntimeError:  # its loop is closed
                pass

    def _take_fault(self, api_key: int, node_id: int, topic: str | None = None,
                    partition: int | None = None) -> int:
        """The injected error for this answer, or 0; counts it in `faults`."""
        with self.lock:
            for rule in self._fail_rules:
                if rule.matches(api_key, node_id, topic, partition):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._fail_rules.remove(rule)
                    self.faults[f"error/{_api_name(api_key)}/{code_for(rule.error_code).name}"] += 1
                    return rule.error_code
        return 0

    def _take_drop(self, api_key: int, node_id: int) -> _DropRule | None:
        with self.lock:
            for rule in self._drop_rules:
                if rule.api_key == api_key and rule.node_id in (None, node_id):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._drop_rules.remove(rule)
                    self.faults[f"drop/{_api_name(api_key)}" + ("/applied" if rule.apply else "")] += 1
                    return rule
        return None

    def _delay_for(self, api_key: int, node_id: int) -> float:
        with self.lock:
            seconds = self._delays.get((api_key, node_id)) or self._delays.get((api_key, None)) or 0.0
            if seconds:
                self.faults[f"delay/{_api_name(api_key)}"] += 1
            return seconds

    # -- default handlers: versions, metadata ------------------------------

    def _api_versions_body(self, error_code: int = 0) -> dict[str, Any]:
        return {"error_code": error_code, "throttle_time_ms": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (lo, hi) in sorted(self.versions.items())]}

    def _handle_api_versions(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        return self._api_versions_body(self._take_fault(messages.API_VERSIONS.key, broker.node_id))

    def _brokers_body(self) -> list[dict[str, Any]]:
        return [{"node_id": b.node_id, "host": "127.0.0.1", "port": b.port, "rack": None}
                for b in self.brokers.values()]

    def _handle_metadata(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        with self.lock:
            by_id = {t.topic_id: t.name for t in self.topics.values()}
            if body.topics is None or (version == 0 and not body.topics):
                names: list[str | None] = list(self.topics)
            else:
                names = [t.name if t.name is not None else by_id.get(t.topic_id) for t in body.topics]
            topics = []
            for name in names:
                t = self.topics.get(name) if name is not None else None
                fault = self._take_fault(messages.METADATA.key, broker.node_id, name)
                if t is None or fault:
                    topics.append({"error_code": fault or UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "partitions": []})
                    continue
                ids = list(self.brokers)
                topics.append({
                    "error_code": 0, "name": name, "topic_id": t.topic_id, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": i, "leader_id": p.leader,
                                    "leader_epoch": p.leader_epoch, "replica_nodes": ids,
                                    "isr_nodes": ids, "offline_replicas": []}
                                   for i, p in enumerate(t.partitions)],
                })
            return {"throttle_time_ms": 0, "brokers": self._brokers_body(), "cluster_id": self.cluster_id,
                    "controller_id": 1, "topics": topics}

    def _handle_create_topics(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        results = []
        for t in body.topics:
            error = self._take_fault(messages.CREATE_TOPICS.key, broker.node_id, t.name)
            if not error and t.num_partitions < 1:
                error = INVALID_PARTITIONS
            if not error and not body.validate_only:
                try:
                    self.create_topic(t.name, t.num_partitions)
                    self.topics[t.name].configs.update({c.name: c.value for c in t.configs})
                except ValueError:
                    error = TOPIC_ALREADY_EXISTS
            topic_id = self.topics[t.name].topic_id if t.name in self.topics else uuid.UUID(int=0)
            results.append({"name": t.name, "topic_id": topic_id, "error_code": error, "error_message": None,
                            "num_partitions": t.num_partitions, "replication_factor": 1, "configs": None})
        return {"throttle_time_ms": 0, "topics": results}

    def _leader_hint(self, p: PartitionState | None) -> dict[str, int]:
        if p is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": p.leader, "leader_epoch": p.leader_epoch}

    # -- produce -----------------------------------------------------------

    def _handle_init_producer_id(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        error = self._take_fault(messages.INIT_PRODUCER_ID.key, broker.node_id)
        if error:
            return {"throttle_time_ms": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}
        with self.lock:
            if body.get("producer_id", -1) >= 0:  # an epoch bump for a producer id we handed out
                producer_id, epoch = body.producer_id, body.producer_epoch + 1
            else:
                producer_id, epoch = self._next_producer_id, 0
                self._next_producer_id += 1
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}

    def _handle_produce(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any] | None:
        responses = []
        moved: set[int] = set()
        with self.lock:
            for t in body.topic_data:
                parts = []
                for pd in t.partition_data:
                    part = self._produce_partition(broker.node_id, t.name, pd.index, pd.records)
                    if part["error_code"] == NOT_LEADER_OR_FOLLOWER and part["current_leader"]["leader_id"] >= 0:
                        moved.add(part["current_leader"]["leader_id"])
                    parts.append(part)
                responses.append({"name": t.name, "partition_responses": parts})
        if body.acks == 0:
            return None
        endpoints = [b for b in self._brokers_body() if b["node_id"] in moved]
        return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": endpoints}

    def _produce_partition(self, node_id: int, topic: str, index: int, records: bytes | None) -> dict[str, Any]:
        """Append one partition's batch on the leader; the partition's part of the answer."""
        p = self._partition(topic, index)
        out: dict[str, Any] = {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                               "log_start_offset": -1, "record_errors": [], "error_message": None,
                               "current_leader": {"leader_id": -1, "leader_epoch": -1}}
        error = self._take_fault(messages.PRODUCE.key, node_id, topic, index)
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
                out["current_leader"] = self._leader_hint(p)
        if error:
            out["error_code"] = error
            return out
        assert p is not None
        out["log_start_offset"] = p.log_start_offset
        if self.message_max_bytes is not None and len(records or b"") > self.message_max_bytes:
            self.faults["message_too_large"] += 1
            out["error_code"] = MESSAGE_TOO_LARGE
            return out
        try:
            batches = decode_record_batches(records or b"")
        except DecodeError as exc:
            out["error_code"], out["error_message"] = CORRUPT_MESSAGE, str(exc)
            return out
        if len(batches) != 1 or _I32.unpack_from(records, 8)[0] + 12 != len(records):  # type: ignore[arg-type]
            out["error_code"] = INVALID_RECORD
            out["error_message"] = "a produce request carries exactly one record batch per partition"
            return out
        batch = batches[0]
        count = batch.last_offset_delta + 1
        state: _ProducerState | None = None
        if batch.producer_id >= 0:
            state = p.producers.get(batch.producer_id)
            if state is None or batch.producer_epoch > state.epoch:
                if batch.base_sequence != 0:
                    out["error_code"] = OUT_OF_ORDER_SEQUENCE_NUMBER
                    return out
                state = p.producers[batch.producer_id] = _ProducerState(batch.producer_epoch)
            elif batch.producer_epoch < state.epoch:
                out["error_code"] = INVALID_PRODUCER_EPOCH
                return out
            elif (kept := state.duplicate_of(batch.base_sequence,
                                             (batch.base_sequence + count - 1) & 0x7FFFFFFF)) is not None:
                out["error_code"] = DUPLICATE_SEQUENCE_NUMBER
                out["base_offset"] = -1 if self.duplicate_offset_unknown else kept.base_offset
                return out
            elif batch.base_sequence != state.next_sequence:  # a gap, or a batch too old to be recognised
                out["error_code"] = OUT_OF_ORDER_SEQUENCE_NUMBER
                return out
        offset = p.high_watermark
        # the base offset (bytes 0-7) and leader epoch (12-15) lie before the CRC's span
        stored = bytearray(records)  # type: ignore[arg-type]
        _I64.pack_into(stored, 0, offset)
        _I32.pack_into(stored, 12, p.leader_epoch)
        p.batches.append(bytes(stored))
        p.next_offsets.append(offset + count)
        self._notify_change()
        if state is not None:
            state.appended(batch.base_sequence, count, offset)
        out["base_offset"] = offset
        return out

    # -- fetch and offsets -------------------------------------------------

    async def _handle_fetch(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        min_bytes = max(body.min_bytes, 1)
        faults_taken: dict[tuple[str, int], int] = {}
        while True:
            changed = broker.changed  # taken before looking, so no append slips between look and wait
            response, size, errors = self._fetch_once(version, body, broker.node_id, faults_taken)
            remaining = deadline - time.monotonic()
            if errors or size >= min_bytes or remaining <= 0:
                return response
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass

    def _fetch_once(self, version: int, body: Struct, node_id: int,
                    faults_taken: dict[tuple[str, int], int]) -> tuple[dict[str, Any], int, bool]:
        """One pass over the asked partitions: (response, bytes of records, any partition error)."""
        total = 0
        any_error = False
        budget = body.max_bytes
        responses = []
        moved: set[int] = set()
        with self.lock:
            by_id = {t.topic_id: t.name for t in self.topics.values()}
            for ft in body.topics:
                name = ft.topic if version <= 12 else by_id.get(ft.topic_id)
                parts = []
                for fp in ft.partitions:
                    key = (name or str(ft.topic_id), fp.partition)
                    if key not in faults_taken:  # a fault is taken once per request, not per poll
                        faults_taken[key] = self._take_fault(messages.FETCH.key, node_id, name, fp.partition)
                    part, data = self._fetch_partition(version, node_id, name, fp, faults_taken[key], budget,
                                                        body.get("isolation_level", 0) == 1)
                    if part["error_code"]:
                        any_error = True
                        if part["current_leader"]["leader_id"] >= 0:
                            moved.add(part["current_leader"]["leader_id"])
                    total += len(data)
                    budget -= len(data)
                    parts.append(part)
                responses.append({"topic": name or "", "topic_id": ft.topic_id, "partitions": parts})
        endpoints = [b for b in self._brokers_body() if b["node_id"] in moved]
        response = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses,
                    "node_endpoints": endpoints}
        return response, total, any_error

    def _fetch_partition(self, version: int, node_id: int, name: str | None, fp: Struct, fault: int,
                         budget: int, read_committed: bool = False) -> tuple[dict[str, Any], bytes]:
        p = self._partition(name, fp.partition) if name is not None else None
        out: dict[str, Any] = {"partition_index": fp.partition, "error_code": 0, "high_watermark": -1,
                               "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                               "preferred_read_replica": -1, "records": b"",
                               "current_leader": {"leader_id": -1, "leader_epoch": -1}}
        error = fault
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_ID if name is None and version > 12 else UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
                out["current_leader"] = self._leader_hint(p)
            elif fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if fp.current_leader_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
            elif not p.log_start_offset <= fp.fetch_offset <= p.high_watermark:
                error = OFFSET_OUT_OF_RANGE
        stable, aborted = p.transactions() if p is not None else (-1, [])
        if p is not None:
            out.update(high_watermark=p.high_watermark, last_stable_offset=stable,
                       log_start_offset=p.log_start_offset)
        if error:
            out["error_code"] = error
            return out, b""
        assert p is not None
        # from the batch holding fetch_offset on; at least one batch, then within the limits (KIP-74);
        # read_committed: only below the last stable offset
        first = bisect.bisect_right(p.next_offsets, fp.fetch_offset)
        chosen: list[bytes] = []
        size = 0
        limit = min(fp.partition_max_bytes, budget)
        for raw in p.batches[first:]:
            if chosen and size + len(raw) > limit or read_committed and _I64.unpack_from(raw)[0] >= stable:
                break
            chosen.append(raw)
            size += len(raw)
        data = b"".join(chosen)
        if self.cut_batches:
            data = b"".join(p.batches[first:])[:limit]
        out["records"] = data
        if read_committed and self.list_aborted:
            upper = p.next_offsets[first + len(chosen) - 1] if chosen else fp.fetch_offset
            out["aborted_transactions"] = [{"producer_id": pid, "first_offset": begin}
                                           for pid, begin, end in aborted if begin < upper and end >= fp.fetch_offset]
        return out, data

    def _handle_list_offsets(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        topics = []
        with self.lock:
            for t in body.topics:
                parts = []
                for lp in t.partitions:
                    parts.append(self._list_offset(version, broker.node_id, t.name, lp,
                                                   body.get("isolation_level", 0) == 1))
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, version: int, node_id: int, name: str, lp: Struct,
                     read_committed: bool = False) -> dict[str, Any]:
        p = self._partition(name, lp.partition_index)
        out: dict[str, Any] = {"partition_index": lp.partition_index, "error_code": 0, "old_style_offsets": [],
                               "timestamp": -1, "offset": -1, "leader_epoch": -1}
        error = self._take_fault(messages.LIST_OFFSETS.key, node_id, name, lp.partition_index)
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
            elif lp.current_leader_epoch >= 0 and lp.current_leader_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if lp.current_leader_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
        if error:
            out["error_code"] = error
            return out
        assert p is not None
        if lp.timestamp == -2:  # earliest
            offset = p.log_start_offset
        elif lp.timestamp == -1:  # latest (read_committed: the last stable offset)
            offset = p.transactions()[0] if read_committed else p.high_watermark
        else:  # the first offset whose timestamp is at least the one asked for (-3: the max timestamp)
            offset, ts = self._offset_for_time(p, lp.timestamp)
            out["timestamp"] = ts
        out["offset"] = offset
        out["old_style_offsets"] = [offset]
        out["leader_epoch"] = p.leader_epoch
        return out

    def _offset_for_time(self, p: PartitionState, timestamp: int) -> tuple[int, int]:
        records = [r for raw in p.batches for b in decode_record_batches(raw) for r in b.records]
        if timestamp == -3:
            if not records:
                return -1, -1
            best = max(records, key=lambda r: (r.timestamp, -r.offset))
            return best.offset, best.timestamp
        for r in records:
            if r.timestamp >= timestamp:
                return r.offset, r.timestamp
        return -1, -1

    # -- configs and records ------------------------------------------------

    def _handle_describe_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """A topic's dynamic configs (what it was created with or altered to), a broker's static
        ones; only the keys asked for, where some are."""
        results = []
        with self.lock:
            for r in body.resources:
                configs: dict[str, str] = {}
                error = self._take_fault(messages.DESCRIBE_CONFIGS.key, broker.node_id,
                                         r.resource_name if r.resource_type == TOPIC_RESOURCE else None)
                source = DYNAMIC_TOPIC_CONFIG
                if error:
                    pass
                elif r.resource_type == TOPIC_RESOURCE and r.resource_name in self.topics:
                    configs = self.topics[r.resource_name].configs
                elif r.resource_type == TOPIC_RESOURCE:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif r.resource_type == BROKER_RESOURCE and r.resource_name == str(broker.node_id):
                    configs, source = self.broker_configs, STATIC_BROKER_CONFIG
                else:  # another broker's configs, or a resource type not modelled
                    error = INVALID_REQUEST
                keys = r.configuration_keys
                results.append({
                    "error_code": error, "error_message": None, "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "configs": [{"name": k, "value": v, "read_only": source == STATIC_BROKER_CONFIG,
                                 "is_default": False, "config_source": source, "is_sensitive": False,
                                 "synonyms": [], "config_type": 0, "documentation": None}
                                for k, v in sorted(configs.items()) if keys is None or k in keys]})
        return {"throttle_time_ms": 0, "results": results}

    def _handle_alter_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """AlterConfigs: a topic's dynamic configs become exactly those given."""
        return self._alter_configs(messages.ALTER_CONFIGS, body, broker,
                                   lambda configs, asked: {c.name: c.value for c in asked})

    def _handle_incremental_alter_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """IncrementalAlterConfigs: each key set, deleted, appended to or subtracted from (a
        comma-separated list), the others kept."""
        def apply(configs: dict[str, str], asked: list[Struct]) -> dict[str, str] | None:
            out = dict(configs)
            for c in asked:
                items = [i for i in out.get(c.name, "").split(",") if i]
                if c.config_operation == CONFIG_SET:
                    out[c.name] = c.value
                elif c.config_operation == CONFIG_DELETE:
                    out.pop(c.name, None)
                elif c.config_operation == CONFIG_APPEND:
                    out[c.name] = ",".join(items + [i for i in c.value.split(",") if i not in items])
                elif c.config_operation == CONFIG_SUBTRACT:
                    out[c.name] = ",".join(i for i in items if i not in c.value.split(","))
                else:
                    return None
            return out

        return self._alter_configs(messages.INCREMENTAL_ALTER_CONFIGS, body, broker, apply)

    def _alter_configs(self, api: Api, body: Struct, broker: MockBroker,
                       apply: Callable[[dict[str, str], list[Struct]], dict[str, str] | None]) -> dict[str, Any]:
        responses = []
        with self.lock:
            for r in body.resources:
                error = self._take_fault(api.key, broker.node_id, r.resource_name)
                t = self.topics.get(r.resource_name)
                if error:
                    pass
                elif r.resource_type != TOPIC_RESOURCE:
                    error = INVALID_REQUEST  # broker configs are not modelled
                elif t is None:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    changed = apply(t.configs, list(r.configs))
                    if changed is None:
                        error = INVALID_CONFIG
                    elif not body.validate_only:
                        t.configs = changed
                responses.append({"error_code": error, "error_message": None,
                                  "resource_type": r.resource_type, "resource_name": r.resource_name})
        return {"throttle_time_ms": 0, "responses": responses}

    def _handle_delete_records(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """DeleteRecords on the leader: the log start moves up to the offset asked (-1: the high
        watermark; never back), so Fetch and ListOffsets from the earliest start there; an offset
        past the high watermark is OFFSET_OUT_OF_RANGE."""
        topics = []
        with self.lock:
            for t in body.topics:
                parts = []
                for dp in t.partitions:
                    p = self._partition(t.name, dp.partition_index)
                    error = self._take_fault(messages.DELETE_RECORDS.key, broker.node_id, t.name, dp.partition_index)
                    if not error and p is None:
                        error = UNKNOWN_TOPIC_OR_PARTITION
                    elif not error and p is not None and p.leader != broker.node_id:
                        error = NOT_LEADER_OR_FOLLOWER
                    offset = dp.offset
                    if not error and p is not None:
                        offset = p.high_watermark if offset == END_OFFSET else offset
                        if not 0 <= offset <= p.high_watermark:
                            error = OFFSET_OUT_OF_RANGE
                        else:
                            p.log_start_offset = max(p.log_start_offset, offset)
                    parts.append({"partition_index": dp.partition_index, "error_code": error,
                                  "low_watermark": p.log_start_offset if p is not None and not error else -1})
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- coordinators and groups -------------------------------------------

    def _handle_find_coordinator(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        coordinator = self.brokers[self.coordinator_id]
        keys = body.coordinator_keys if version >= 4 else [body.key]
        entries = []
        for key in keys:
            error = self._take_fault(messages.FIND_COORDINATOR.key, broker.node_id)
            entries.append({"key": key, "node_id": -1 if error else coordinator.node_id,
                            "host": "" if error else "127.0.0.1", "port": -1 if error else coordinator.port,
                            "error_code": error, "error_message": None})
        first = entries[0] if entries else {"node_id": -1, "host": "", "port": -1, "error_code": 0}
        return {"throttle_time_ms": 0, "error_code": first["error_code"], "error_message": None,
                "node_id": first["node_id"], "host": first["host"], "port": first["port"],
                "coordinators": entries}

    def _group_error(self, api: Api, broker: MockBroker) -> int:
        """An injected fault, else NOT_COORDINATOR away from the coordinator, else 0."""
        error = self._take_fault(api.key, broker.node_id)
        if not error and broker.node_id != self.coordinator_id:
            error = NOT_COORDINATOR
        return error

    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
        return group

    async def _handle_join_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        def answer(error: int, member_id: str = "", **rest: Any) -> dict[str, Any]:
            out = {"throttle_time_ms": 0, "error_code": error, "generation_id": -1, "protocol_type": None,
                   "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
                   "member_id": member_id, "members": []}
            out.update(rest)
            return out

        error = self._group_error(messages.JOIN_GROUP, broker)
        if error:
            return answer(error, body.member_id)
        with self.lock:
            group = self._group(body.group_id)
            member_id = body.member_id
            if not member_id:
                self._member_counter += 1
                member_id = f"{body.group_instance_id or 'member'}-{self._member_counter}"
                if version >= 4 and body.group_instance_id is None:
                    # KIP-394: the member must come back with the id it was given
                    group.named.add(member_id)
                    return answer(MEMBER_ID_REQUIRED, member_id)
            elif member_id in group.named:
                group.named.discard(member_id)
            elif member_id not in group.members:
                return answer(UNKNOWN_MEMBER_ID, member_id)
            protocols = [(p.name, p.metadata) for p in body.protocols]
            if group.protocol_type not in (None, body.protocol_type) and group.members.keys() - {member_id}:
                return answer(INCONSISTENT_GROUP_PROTOCOL, member_id)
            rebalance_ms = body.rebalance_timeout_ms if body.rebalance_timeout_ms > 0 else body.session_timeout_ms
            member = group.members.get(member_id) or _Member(member_id, body.group_instance_id, [], 0, 0)
            member.protocols = protocols
            member.session_timeout_ms = body.session_timeout_ms
            member.rebalance_timeout_ms = rebalance_ms
            member.group_instance_id = body.group_instance_id
            group.members[member_id] = member
            group.protocol_type = body.protocol_type
            loop = asyncio.get_running_loop()
            member.joined = loop.create_future()
            joined = member.joined
            if group.state != "PreparingRebalance":
                self._prepare_rebalance(group, loop, rebalance_ms)
            group.joined_this_round.add(member_id)
            self._maybe_complete_join(group)
        result = dict(await joined)
        return answer(result.pop("error_code"), **result)

    def _prepare_rebalance(self, group: _Group, loop: asyncio.AbstractEventLoop, timeout_ms: int) -> None:
        group.state = "PreparingRebalance"
        group.joined_this_round = set()
        for m in group.members.values():  # a member waiting in SyncGroup must rejoin
            if m.synced is not None and not m.synced.done():
                m.synced.set_result(REBALANCE_IN_PROGRESS)
        if group.round_deadline is not None:
            group.round_deadline.cancel()
        group.round_deadline = loop.call_later(timeout_ms / 1000, self._end_round, group)

    def _end_round(self, group: _Group) -> None:
        """The rebalance timeout passed: members that did not rejoin are out."""
        with self.lock:
            for member_id in list(group.members):
                if member_id not in group.joined_this_round:
                    del group.members[member_id]
            self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: _Group) -> None:
        if group.state != "PreparingRebalance":
            return
        if not group.members:
            group.state = "Empty"
            return
        if group.members.keys() - group.joined_this_round:
            return  # a member has yet to rejoin
        if group.round_deadline is not None:
            group.round_deadline.cancel()
            group.round_deadline = None
        members = list(group.members.values())
        names = [name for name, _ in members[0].protocols]
        common = [n for n in names if all(n in dict(m.protocols) for m in members)]
        group.generation += 1
        group.protocol_name = common[0] if common else None
        if group.leader not in group.members:
            group.leader = members[0].member_id
        group.state = "CompletingRebalance"
        everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": dict(m.protocols).get(group.protocol_name, b"")} for m in members]
        for m in members:
            if m.joined is not None and not m.joined.done():
                m.joined.set_result({
                    "error_code": 0 if common else INCONSISTENT_GROUP_PROTOCOL,
                    "generation_id": group.generation, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name, "leader": group.leader, "member_id": m.member_id,
                    "members": everyone if m.member_id == group.leader else []})
            m.joined = None

    async def _handle_sync_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        def answer(error: int, assignment: bytes = b"") -> dict[str, Any]:
            with self.lock:
                group = self._groups.get(body.group_id)
                ptype = group.protocol_type if group else None
                pname = group.protocol_name if group else None
            return {"throttle_time_ms": 0, "error_code": error, "protocol_type": ptype, "protocol_name": pname,
                    "assignment": assignment}

        error = self._group_error(messages.SYNC_GROUP, broker)
        if error:
            return answer(error)
        with self.lock:
            group = self._groups.get(body.group_id)
            member = group.members.get(body.member_id) if group else None
            if group is None or member is None:
                return answer(UNKNOWN_MEMBER_ID)
            if body.generation_id != group.generation:
                return answer(ILLEGAL_GENERATION)
            if group.state == "PreparingRebalance":
                return answer(REBALANCE_IN_PROGRESS)
            if group.state == "Stable":
                return answer(0, member.assignment)
            if body.member_id == group.leader:
                given = {a.member_id: a.assignment for a in body.assignments}
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                    if m.synced is not None and not m.synced.done():
                        m.synced.set_result(0)
                group.state = "Stable"
                return answer(0, member.assignment)
            member.synced = asyncio.get_running_loop().create_future()
            synced = member.synced
        error = await synced
        with self.lock:
            member.synced = None
            return answer(error, b"" if error else member.assignment)

    def _handle_heartbeat(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        error = self._group_error(messages.HEARTBEAT, broker)
        if not error:
            with self.lock:
                group = self._groups.get(body.group_id)
                if group is None or body.member_id not in group.members:
                    error = UNKNOWN_MEMBER_ID
                elif body.generation_id != group.generation:
                    error = ILLEGAL_GENERATION
                elif group.state == "PreparingRebalance":
                    error = REBALANCE_IN_PROGRESS
        return {"throttle_time_ms": 0, "error_code": error}

    def _handle_leave_group(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        leaving = [body.member_id] if version <= 2 else [m.member_id for m in body.members]
        error = self._group_error(messages.LEAVE_GROUP, broker)
        results = []
        if not error:
            with self.lock:
                group = self._groups.get(body.group_id)
                for member_id in leaving:
                    if group is None or member_id not in group.members:
                        results.append({"member_id": member_id, "group_instance_id": None,
                                        "error_code": UNKNOWN_MEMBER_ID})
                        continue
                    del group.members[member_id]
                    results.append({"member_id": member_id, "group_instance_id": None, "error_code": 0})
                if group is not None and any(r["error_code"] == 0 for r in results):
                    if group.members:
                        loop = broker.loop
                        timeout = max(m.rebalance_timeout_ms for m in group.members.values())
                        self._prepare_rebalance(group, loop, timeout)
                    else:
                        group.state = "Empty"
                        group.leader = ""
                if version <= 2 and results and results[0]["error_code"]:
                    error = results[0]["error_code"]
        return {"throttle_time_ms": 0, "error_code": error, "members": results}

    def _handle_offset_commit(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        topics = []
        with self.lock:
            group = self._group(body.group_id)
            common = 0
            if broker.node_id != self.coordinator_id:
                common = NOT_COORDINATOR
            elif body.generation_id_or_member_epoch >= 0 or body.member_id:
                if body.member_id not in group.members:
                    common = UNKNOWN_MEMBER_ID
                elif body.generation_id_or_member_epoch != group.generation:
                    common = ILLEGAL_GENERATION
                elif group.state == "PreparingRebalance":
                    common = REBALANCE_IN_PROGRESS
            for t in body.topics:
                parts = []
                for p in t.partitions:
                    error = self._take_fault(messages.OFFSET_COMMIT.key, broker.node_id, t.name, p.partition_index)
                    error = error or common
                    if not error:
                        group.offsets[(t.name, p.partition_index)] = (
                            p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                    parts.append({"partition_index": p.partition_index, "error_code": error})
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _handle_offset_fetch(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        asked = ([{"group_id": body.group_id, "topics": body.topics}] if version <= 7
                 else [{"group_id": g.group_id, "topics": g.topics} for g in body.groups])
        groups = []
        with self.lock:
            for g in asked:
                group = self._groups.get(g["group_id"])
                offsets = group.offsets if group else {}
                if g["topics"] is None:
                    wanted: dict[str, list[int]] = {}
                    for name, index in sorted(offsets):
                        wanted.setdefault(name, []).append(index)
                else:
                    wanted = {t.name: list(t.partition_indexes) for t in g["topics"]}
                topics = []
                for name, indexes in wanted.items():
                    parts = []
                    for index in indexes:
                        error = self._take_fault(messages.OFFSET_FETCH.key, broker.node_id, name, index)
                        if not error and broker.node_id != self.coordinator_id:
                            error = NOT_COORDINATOR
                        offset, epoch, metadata = offsets.get((name, index), (-1, -1, ""))
                        parts.append({"partition_index": index, "committed_offset": -1 if error else offset,
                                      "committed_leader_epoch": epoch, "metadata": metadata, "error_code": error})
                    topics.append({"name": name, "partitions": parts})
                groups.append({"group_id": g["group_id"], "topics": topics, "error_code": 0})
        first = groups[0]
        return {"throttle_time_ms": 0, "topics": first["topics"], "error_code": 0, "groups": groups}
