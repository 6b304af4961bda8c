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

One file per API area, as franz-go's kfake keeps them; `MockCluster` gathers them as its bases:
`state.py` (topics, partitions, producer sequences), `broker.py` (`MockBroker`, serving one
connection's requests in order), `faults.py` (the fault controls), and the default handlers in
`handlers_metadata.py`, `handlers_produce.py`, `handlers_fetch.py`, `handlers_configs.py`
(configs and DeleteRecords) and `handlers_groups.py` (coordinator, groups, committed offsets);
`protocol_codes.py` holds the error codes they answer with.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter

from ..wire import messages
from ..wire.protocol import Api, Struct
from ..wire.record_batch import Record
from ..wire.record_decoding import decode_record_batches
from ..wire.record_encoding import encode_control_batch
from .broker import Handler, MockBroker
from .faults import DropRule, FailRule, FaultControls
from .handlers_configs import ConfigAndRecordHandlers
from .handlers_fetch import FetchHandlers
from .handlers_groups import Group, GroupHandlers
from .handlers_metadata import MetadataHandlers
from .handlers_produce import ProduceHandlers
from .protocol_codes import api_name, key_of
from .state import PartitionState, TopicState

DEFAULT_MESSAGE_MAX_BYTES = 1048588  # Kafka's message.max.bytes default


class MockCluster(FaultControls, MetadataHandlers, ProduceHandlers, FetchHandlers, ConfigAndRecordHandlers,
                  GroupHandlers):
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
            low, _ = self.versions[key_of(api)]
            self.versions[key_of(api)] = (low, high)
        self._log: list[tuple[int, int, int, Struct]] = []
        self._fail_rules: list[FailRule] = []
        self._drop_rules: list[DropRule] = []
        self._delays: dict[tuple[int, int | None], float] = {}
        self._next_producer_id = 1000
        self._groups: dict[str, Group] = {}
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
        key = key_of(api_key)
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
                raise TimeoutError(f"{got} {api_name(key_of(api_key))} requests arrived in {timeout}s, not {count}")
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

    def _notify_change(self) -> None:
        """A log grew or a leader moved: wake every waiting Fetch to look again."""
        for broker in self.brokers.values():
            try:
                broker.loop.call_soon_threadsafe(broker.wake)
            except RuntimeError:  # its loop is closed
                pass
