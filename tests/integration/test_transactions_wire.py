"""Transactions at the wire level on tansu: what `TransactionCoordinator` commits, our
read_committed Fetch (through `CommittedReader`) and a read_committed confluent-kafka consumer
read; what it aborts, our read drops; a second init with the same transactional.id fences the
first producer for good.

tansu 0.6.0 writes abort markers and serves the aborted records, but lists no aborted
transactions in its Fetch responses: librdkafka's read_committed (Java's rule) hands them out
there, so the confluent read is checked to hold every committed record, plus exactly the
aborted ones while tansu lists none; our reader decides by the markers and reads exactly the
committed records.

Batches are produced by hand (transactional, idempotent sequences per partition), so this
checks the protocol calls and the batch format, not a producer pipeline.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from raykafka.driver.admin import Admin  # noqa: E402
from raykafka.wire import messages  # noqa: E402
from raykafka.wire.admin import TopicPartition  # noqa: E402
from raykafka.wire.cluster import Cluster  # noqa: E402
from raykafka.wire.config import parse_config  # noqa: E402
from raykafka.wire.errors import ProducerFencedError, TransactionError, TransactionTimeoutError  # noqa: E402
from raykafka.wire.read_committed import CommittedReader  # noqa: E402
from raykafka.wire.record_decoding import decode_record_batches  # noqa: E402
from raykafka.wire.record_encoding import encode_record_batch  # noqa: E402
from raykafka.wire.transactions import TransactionCoordinator, TransactionManager, TxnState, send_error  # noqa: E402

pytestmark = [pytest.mark.broker]

PARTITIONS = 2
READ_COMMITTED = 1
ZOMBIE_TIMEOUT_MS = 3_000  # bounds the fenced producer's retries of an EndTxn tansu leaves unanswered


class TransactionalSender:
    """Produce requests of one transactional producer: its id and epoch from the manager, a
    sequence per partition (what the producer pipeline will own)."""

    def __init__(self, cluster: Cluster, txn: TransactionCoordinator):
        self.cluster, self.txn = cluster, txn
        self.sequences: dict[TopicPartition, int] = {}

    async def send(self, tp: TopicPartition, values: list[bytes]) -> int:
        """Write `values` to `tp` in the open transaction; the base offset, or the named error."""
        m = self.txn.manager
        assert m.is_send_allowed(tp), f"{tp} not added to the transaction"
        sequence = self.sequences.get(tp, 0)
        batch = encode_record_batch(values, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                                    base_sequence=sequence, is_transactional=True)
        conn = await self.cluster.leader_connection(tp.topic, tp.partition)
        body = {"transactional_id": m.transactional_id, "acks": -1, "timeout_ms": 10_000,
                "topic_data": [{"name": tp.topic, "partition_data": [{"index": tp.partition, "records": batch}]}]}
        result = (await conn.request(messages.PRODUCE, body)).responses[0].partition_responses[0]
        if result.error_code:
            raise m.fail(send_error(result.error_code, f"produce to {tp.topic}/{tp.partition}"))
        self.sequences[tp] = sequence + len(values)
        return result.base_offset


async def transaction(txn: TransactionCoordinator, sender: TransactionalSender, rows: dict[TopicPartition, list[bytes]],
                      commit: bool) -> None:
    txn.begin_transaction()
    await txn.add_partitions(rows)
    for tp, values in rows.items():
        await sender.send(tp, values)
    await (txn.commit_transaction() if commit else txn.abort_transaction())


def values_for(tag: str, tps: list[TopicPartition], n: int = 5) -> dict[TopicPartition, list[bytes]]:
    return {tp: [f"{tag}-{tp.partition}-{i}".encode() for i in range(n)] for tp in tps}


def read_committed_confluent(bootstrap: str, topic: str, timeout: float = 30.0) -> list[bytes]:
    """Every record a read_committed confluent-kafka consumer reads from the topic's start up to
    the partitions' ends (their high watermarks, which a committed transaction's marker ends)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                         "isolation.level": "read_committed", "enable.auto.commit": False,
                                         "enable.partition.eof": True})
    try:
        tps = [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        consumer.assign(tps)
        at_end: set[int] = set()
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"read_committed read did not reach the end: {len(out)} records"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            out.append(msg.value())
        return out
    finally:
        consumer.close()


async def read_committed_ours(cluster: Cluster, topic: str) -> tuple[list[bytes], bool]:
    """Our Fetch with isolation_level read_committed, through `CommittedReader` by markers, to
    each partition's last stable offset; and whether the broker listed any aborted transaction."""
    out: list[bytes] = []
    listed = False
    for partition in range(PARTITIONS):
        conn = await cluster.leader_connection(topic, partition)
        version = min(conn.version_for(messages.FETCH), 12)  # v13+ names topics by id
        reader = CommittedReader(by_markers=True)
        offset, stable = 0, None
        decided = 0  # every offset before it is handed out or dropped (held batches stay after it)
        for _ in range(50):
            body = {"max_wait_ms": 100, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": READ_COMMITTED,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 8 << 20}]}]}
            data = (await conn.request(messages.FETCH, body, version)).responses[0].partitions[0]
            assert data.error_code == 0
            listed = listed or bool(data.aborted_transactions)
            stable = data.last_stable_offset if data.last_stable_offset >= 0 else data.high_watermark
            fetched = [b for b in decode_record_batches(data.records or b"") if b.next_offset > offset]
            for batch in reader.feed(fetched, data.aborted_transactions):  # held ones come out later
                out.extend(r.value for r in batch.records if r.offset >= decided)
            offset = max([offset] + [b.next_offset for b in fetched])
            decided = offset if reader.first_held is None else reader.first_held
            if offset >= stable:
                break
        assert stable is not None and offset >= stable, f"{topic}/{partition}: fetched to {offset} of {stable}"
        assert reader.held == 0, f"{topic}/{partition}: batches below the last stable offset without a marker"
    return out, listed


def check_confluent_read(bootstrap: str, topic: str, committed: list[bytes], aborted: list[bytes],
                         listed: bool) -> None:
    """A read_committed confluent-kafka consumer reads every committed record; the aborted ones
    too while the broker lists no aborted transactions (tansu 0.6.0), never otherwise."""
    read = sorted(read_committed_confluent(bootstrap, topic))
    assert sorted(set(read) - set(aborted)) == sorted(committed)
    assert len(read) == len(set(read))
    assert sorted(set(read) & set(aborted)) == ([] if listed else sorted(aborted))


def test_committed_transactions_are_read_and_aborted_ones_are_not(bootstrap, topic_name):
    topic = topic_name("txn-wire")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    first, aborted, second = values_for("first", tps), values_for("aborted", tps), values_for("second", tps[:1])

    async def scenario() -> tuple[list[bytes], bool]:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            txn = TransactionCoordinator(cluster, TransactionManager(f"txn-{topic}", 60_000), timeout_ms=30_000)
            await txn.init_transactions()
            assert txn.manager.producer_id >= 0 and txn.manager.producer_epoch >= 0
            sender = TransactionalSender(cluster, txn)
            await transaction(txn, sender, first, commit=True)
            await transaction(txn, sender, aborted, commit=False)
            await transaction(txn, sender, second, commit=True)
            assert txn.manager.state is TxnState.READY
            return await read_committed_ours(cluster, topic)
        finally:
            await cluster.close()

    ours, listed = asyncio.run(scenario())
    committed = [v for rows in (first, second) for vs in rows.values() for v in vs]
    assert sorted(ours) == sorted(committed)
    check_confluent_read(bootstrap, topic, committed, [v for vs in aborted.values() for v in vs], listed)


@pytest.mark.parametrize("zombie_sends", [True, False], ids=["zombie-produces", "zombie-commits"])
def test_a_second_init_with_the_same_transactional_id_fences_the_first(bootstrap, topic_name, zombie_sends):
    """The first producer's next Produce fails fenced (and its commit raises that error again),
    or, if it only commits, its EndTxn fails fenced."""
    topic = topic_name("txn-fence")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    zombie_rows, fresh_rows = values_for("zombie", tps), values_for("fresh", tps)

    async def scenario() -> tuple[TransactionCoordinator, TransactionCoordinator, list[str], list[bytes], bool]:
        cluster_a = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        cluster_b = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        failures: list[str] = []
        try:
            tid = f"txn-{topic}"
            a = TransactionCoordinator(cluster_a, TransactionManager(tid, 60_000), timeout_ms=ZOMBIE_TIMEOUT_MS)
            await a.init_transactions()
            sender_a = TransactionalSender(cluster_a, a)
            a.begin_transaction()
            await a.add_partitions(tps)
            await sender_a.send(tps[0], zombie_rows[tps[0]])

            b = TransactionCoordinator(cluster_b, TransactionManager(tid, 60_000), timeout_ms=30_000)
            await b.init_transactions()  # fences a, and aborts what a left open
            assert (b.manager.producer_id, b.manager.producer_epoch) != (a.manager.producer_id, a.manager.producer_epoch)

            # the zombie's next send, then its commit: each fails, fatally, naming the cause
            if zombie_sends:
                with pytest.raises(ProducerFencedError) as send_error:
                    await sender_a.send(tps[1], zombie_rows[tps[1]])
                failures.append(f"send: {send_error.value}")
            with pytest.raises(TransactionError) as commit_error:
                await a.commit_transaction()
            failures.append(f"commit: {commit_error.value}")
            if isinstance(commit_error.value, TransactionTimeoutError):
                # tansu 0.6.0 closes the connection instead of answering a fenced EndTxn
                # PRODUCER_FENCED: retried as a dropped connection, until the call's time is up
                assert not zombie_sends and "closed by the broker" in str(commit_error.value)
                assert a.manager.state is TxnState.COMMITTING
            else:
                assert isinstance(commit_error.value, ProducerFencedError)
                assert a.manager.state is TxnState.FATAL_ERROR

            await transaction(b, TransactionalSender(cluster_b, b), fresh_rows, commit=True)
            ours, listed = await read_committed_ours(cluster_b, topic)
            return a, b, failures, ours, listed
        finally:
            await cluster_a.close()
            await cluster_b.close()

    a, b, failures, ours, listed = asyncio.run(scenario())
    assert len(failures) == (2 if zombie_sends else 1), failures
    assert ("produce to" if zombie_sends else "EndTxn") in failures[-1]
    if zombie_sends:
        assert isinstance(a.manager.last_error, ProducerFencedError), failures
        assert all("PRODUCER_FENCED" in f or "INVALID_PRODUCER_EPOCH" in f for f in failures), failures
    assert b.manager.state is TxnState.READY
    committed = [v for vs in fresh_rows.values() for v in vs]
    assert sorted(ours) == sorted(committed)  # the zombie's record, aborted by the second init, is dropped
    check_confluent_read(bootstrap, topic, committed, zombie_rows[tps[0]], listed)


def test_offsets_sent_to_a_transaction_commit_with_it(bootstrap, topic_name):
    """Consume-transform-produce's offsets: AddOffsetsToTxn + TxnOffsetCommit make the group's
    offsets those of the committed transaction; an aborted transaction's offsets are not kept."""
    topic, source = topic_name("txn-out"), topic_name("txn-in")
    group = f"g-{topic}"
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS, source: PARTITIONS})
    out = TopicPartition(topic, 0)
    inputs = [TopicPartition(source, p) for p in range(PARTITIONS)]

    async def scenario() -> None:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            txn = TransactionCoordinator(cluster, TransactionManager(f"txn-{topic}", 60_000), timeout_ms=30_000)
            await txn.init_transactions()
            sender = TransactionalSender(cluster, txn)
            txn.begin_transaction()
            await txn.add_partitions([out])
            await sender.send(out, [b"transformed-1"])
            await txn.send_offsets({inputs[0]: 10, inputs[1]: 20}, group)
            await txn.commit_transaction()
            txn.begin_transaction()
            await txn.add_partitions([out])
            await sender.send(out, [b"transformed-2"])
            await txn.send_offsets({inputs[0]: 99}, group)
            await txn.abort_transaction()
            assert txn.manager.state is TxnState.READY
        finally:
            await cluster.close()

    asyncio.run(scenario())
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(group) == {inputs[0]: 10, inputs[1]: 20}


def test_an_open_transaction_is_read_once_it_commits(bootstrap, topic_name):
    """read_committed stops at the last stable offset: records of a transaction still open are
    not read, and are once it commits."""
    topic = topic_name("txn-open")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: PARTITIONS})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    first, pending = values_for("first", tps), values_for("pending", tps[1:])

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            txn = TransactionCoordinator(cluster, TransactionManager(f"txn-{topic}", 60_000), timeout_ms=30_000)
            await txn.init_transactions()
            sender = TransactionalSender(cluster, txn)
            await transaction(txn, sender, first, commit=True)
            txn.begin_transaction()
            await txn.add_partitions(pending)
            await sender.send(tps[1], pending[tps[1]])
            while_open, _ = await read_committed_ours(cluster, topic)
            await txn.commit_transaction()
            after, _ = await read_committed_ours(cluster, topic)
            return while_open, after
        finally:
            await cluster.close()

    while_open, after = asyncio.run(scenario())
    committed = [v for vs in first.values() for v in vs]
    assert sorted(while_open) == sorted(committed)
    assert sorted(after) == sorted(committed + pending[tps[1]])
