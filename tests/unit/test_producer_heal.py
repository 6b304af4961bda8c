"""What a producer heals from, without Ray: the batches it keeps until their messages end, and
which unanswered messages the log already holds (driver/producer_log_match.py)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from raykafka.actors.batch import MessageBatch
from raykafka.actors.producer_results import Outcome
from raykafka.driver.producer_ledger import Ledger
from raykafka.driver.producer_log_match import (
    AckedEnd,
    KeptBatches,
    PartitionScan,
    SequenceBook,
    acked_ends,
    scan_starts,
    written_outcomes,
)
from raykafka.wire.fetch import WrittenRecord


def sent(ledger: Ledger, topic: str, values: list[bytes], keys: list[bytes] | None = None,
         stamps: list[int] | None = None) -> MessageBatch:
    """Messages sent alone, gathered into one batch as the sender hands them on."""
    ids = []
    for v in values:
        ledger.reserve(len(v))
        ids.append(ledger.add(Future(), topic, 0, len(v)))
    return MessageBatch(topic=topic, ids=ids, values=list(values), keys=keys,
                        timestamps=stamps if stamps is not None else 1000, partition=2, base_sequence=40,
                        producer_id=7, retries=3)


def test_kept_batches_give_back_only_the_unended_messages_fresh_for_a_new_pipeline():
    ledger = Ledger()
    kept = KeptBatches()
    first = sent(ledger, "t", [b"a", b"b", b"c"])
    second = sent(ledger, "u", [b"d"])
    kept.keep([first, second], ledger)
    ledger.settle([Outcome([0, 2], "t", 1, 10)])
    again = kept.unresolved(ledger)
    assert [(b.topic, list(b.ids), list(b.values)) for b in again] == [("t", [1], [b"b"]), ("u", [3], [b"d"])]
    assert all((b.partition, b.base_sequence, b.producer_id, b.retries) == (-1, -1, -1, 0) for b in again)
    # the dead pipeline may have written them: their time running out is never "not delivered"
    assert all(b.possibly_written for b in again)
    ledger.settle([Outcome([1, 3], "t", 1, 12)])
    kept.prune(ledger)
    assert len(kept) == 0


def test_a_send_batch_is_kept_by_its_records_that_have_not_ended():
    ledger = Ledger()
    state = ledger.add_batch(4, Future(), 40)
    batch = MessageBatch(topic="t", ids=range(state.start, state.start + 4), values=[b"w", b"x", b"y", b"z"])
    kept = KeptBatches()
    kept.keep([batch], ledger)
    ledger.settle([Outcome(range(1, 3), "t", 0, 5)])
    assert [list(b.values) for b in kept.unresolved(ledger)] == [[b"w", b"z"]]


def test_the_logs_records_end_the_earliest_alike_messages_and_the_rest_go_again():
    ledger = Ledger()
    batch = sent(ledger, "t", [b"x", b"y", b"x", b"z"], keys=[b"k", b"k", b"k", b"k"], stamps=[5, 5, 6, 7])
    written = {("t", 0): [WrittenRecord(100, 5, b"k", b"x"), WrittenRecord(101, 5, b"k", b"y"),
                          WrittenRecord(102, 6, b"k", b"x")],
               ("t", 1): [WrittenRecord(9, 5, b"other", b"x")]}  # not one of ours: a different key
    found = written_outcomes([batch], written)
    assert sorted((o.ids[0], o.partition, o.first_offset) for o in found) == [(0, 0, 100), (1, 0, 101), (2, 0, 102)]


def test_a_record_stamped_at_log_append_still_ends_its_message_the_timestamp_only_chooses():
    ledger = Ledger()
    batch = sent(ledger, "t", [b"x", b"x"], stamps=[5, 6])
    found = written_outcomes([batch], {("t", 3): [WrittenRecord(50, 6, None, b"x"),
                                                  WrittenRecord(51, 99_999, None, b"x")]})
    assert [(o.ids[0], o.first_offset) for o in found] == [(1, 50), (0, 51)]


def test_acked_ends_keep_the_furthest_acknowledged_offset_and_message_of_each_partition():
    ends: dict = {}
    acked_ends(ends, [Outcome(range(0, 3), "t", 0, 10), Outcome(range(3, 4), "t", 0, 5),
                      Outcome.failed([5], RuntimeError("x"), "t", 1), Outcome(range(6, 8), "t", 1, -1)])
    assert ends == {("t", 0): AckedEnd(13, 3)}
    acked_ends(ends, [Outcome(np.array([9, 4]), "t", 2, 0)])
    assert ends[("t", 2)] == AckedEnd(2, 9)


def test_a_heal_reads_from_the_acknowledged_end_only_where_no_older_message_is_unresolved():
    """t/0: A (noted, sequence 0) was answered REQUEST_TIMED_OUT after the broker appended it, and
    B (sequence 2), sent after it, acknowledged: A may sit before B's end, so t/0 is read from
    its time, not from the end. t/1's unresolved message is newer than its last acknowledged
    one: its end stands. u: a message no note names is older than u/0's last acknowledged one,
    and may be in any partition of u."""
    ledger, book = Ledger(), SequenceBook()
    a = _noted(book, ledger, "t", 0, [b"a0", b"a1"], [[], []], seq=0)
    b = _noted(book, ledger, "t", 0, [b"b0", b"b1"], [[], []], seq=2)
    c = _noted(book, ledger, "t", 1, [b"c"], [[]], seq=0)
    d = _noted(book, ledger, "t", 1, [b"d"], [[]], seq=1)
    lost = sent(ledger, "u", [b"e"])  # its BrokerWorker died before the driver polled its note
    f = sent(ledger, "u", [b"f"])
    acked = [Outcome(list(b.ids), "t", 0, 10), Outcome(list(c.ids), "t", 1, 4), Outcome(list(f.ids), "u", 0, 7)]
    ledger.settle(acked)
    ends: dict = {}
    acked_ends(ends, acked)
    kept = KeptBatches()
    kept.keep([a, b, c, d, lost, f], ledger)
    starts = scan_starts(ends, kept.unresolved(ledger), book, ledger.open_positions)
    assert starts == {("t", 1): 5}
    ledger.settle([Outcome(list(a.ids), "t", 0, 8), Outcome(list(lost.ids), "u", 1, 0)])
    assert scan_starts(ends, kept.unresolved(ledger), book, ledger.open_positions) == {
        ("t", 0): 12, ("t", 1): 5, ("u", 0): 8}


def test_the_log_is_read_again_for_records_that_land_after_the_first_read(monkeypatch):
    """A dead Flusher's last request reaches the broker after the healer's first read of the
    log (here: written between the first read and the next, on the mock cluster): the read
    again finds it, so its messages are not sent a second time."""
    import asyncio

    from raykafka.driver import producer_log_match as producer_heal
    from raykafka.mock import MockCluster
    from raykafka.wire import fetch, messages
    from raykafka.wire.cluster import Cluster
    from raykafka.wire.config import parse_config
    from raykafka.wire.record_encoding import encode_record_batch

    monkeypatch.setattr(producer_heal, "SETTLE_S", 0.05)
    reads: list[int] = []
    real = fetch.records_of_producer

    async def write(cluster, producer, seq: int, values: list[bytes]) -> None:
        conn = await cluster.leader_connection("t", 0)
        batch = encode_record_batch(values, producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                                    base_sequence=seq)
        body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": batch}]}]}
        assert (await conn.request(messages.PRODUCE, body)).responses[0].partition_responses[0].error_code == 0

    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        config = parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}"})

        async def first_write():
            cluster = Cluster(config)
            try:
                conn = await cluster.leader_connection("t", 0)
                producer = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                          "transaction_timeout_ms": 60000})
                await write(cluster, producer, 0, [b"a", b"b"])
                return producer
            finally:
                await cluster.close()

        producer = asyncio.run(first_write())

        async def read_then_late_write(cluster, topic, partition, start, producer_id, max_decompressed):
            found = await real(cluster, topic, partition, start, producer_id, max_decompressed)
            reads.append(start)
            if len(reads) == 1:  # the late request lands once the first read is done
                await write(cluster, producer, 2, [b"c"])
            return found

        monkeypatch.setattr(fetch, "records_of_producer", read_then_late_write)
        plan = {("t", 0): PartitionScan(frozenset({(producer.producer_id, producer.producer_epoch)}), 0)}
        written = producer_heal.read_log(config, plan, {}, bump=None).records
        assert [r.value for r in written[("t", 0)]] == [b"a", b"b", b"c"]
        assert reads == [0, 2, 3]  # from the start, then past what each read found, until one finds nothing
        assert mock.handler_errors == []



def _noted(book, ledger: Ledger, topic: str, partition: int, values: list[bytes], headers: list, seq: int,
           explicit: int = -1) -> MessageBatch:
    """Messages sent alone with these headers, numbered at `seq` in `partition` by producer 7
    epoch 0, and the LeaderDispatcher's note of it in `book`."""
    from raykafka.actors.idempotence import NumberedBatch
    from raykafka.wire.record_encoding import encode_header_lists

    ids = []
    for v in values:
        ledger.reserve(len(v))
        ids.append(ledger.add(Future(), topic, 0, len(v)))
    book.add([NumberedBatch(topic, partition, 7, 0, seq, ids, 1000)], ledger)
    return MessageBatch(topic=topic, ids=ids, values=list(values), timestamps=1000,
                        headers=encode_header_lists(headers), partitions=[explicit] * len(values))


def test_a_record_is_its_message_by_partition_and_sequence_not_by_what_it_holds():
    """A (partition 0, header msg-id A) and B (partition 1, header msg-id B) hold the same null
    key and value at the same time; the log holds only B, at partition 1 offset 7. B ends
    delivered there; A is not found, so it goes again."""

    ledger, book = Ledger(), SequenceBook()
    a = _noted(book, ledger, "t", 0, [b"same"], [[("msg-id", b"A")]], seq=0)
    b = _noted(book, ledger, "t", 1, [b"same"], [[("msg-id", b"B")]], seq=0)
    written = {("t", 1): [WrittenRecord(7, 1000, None, b"same", 7, 0, 0, (("msg-id", b"B"),))]}
    found = written_outcomes([a, b], written, book)
    assert [(list(o.ids), o.partition, o.first_offset) for o in found] == [(list(b.ids), 1, 7)]


def test_without_a_note_a_record_is_matched_by_its_headers_and_explicit_partition_too():
    """The note of B was lost (its BrokerWorker died before the driver polled it): the
    record is matched by what it holds, headers and an explicit partition included."""
    from raykafka.wire.record_encoding import encode_header_lists

    ledger, book = Ledger(), SequenceBook()
    a = sent(ledger, "t", [b"same"], stamps=[1000])
    a.headers, a.partitions = encode_header_lists([[("msg-id", b"A")]]), [0]
    b = sent(ledger, "t", [b"same"], stamps=[1000])
    b.headers = encode_header_lists([[("msg-id", b"B")]])
    written = {("t", 1): [WrittenRecord(7, 1000, None, b"same", 7, 0, 0, (("msg-id", b"B"),))]}
    found = written_outcomes([a, b], written, book)
    assert [(list(o.ids), o.partition, o.first_offset) for o in found] == [(list(b.ids), 1, 7)]
    # the same record can never be A's: A asked for partition 0 explicitly
    assert written_outcomes([a], {("t", 1): [WrittenRecord(7, 1000, None, b"same", 7, 0, 0,
                                                           (("msg-id", b"A"),))]}, book) == []


def test_the_book_names_messages_by_sequence_across_notes_and_forgets_ended_ones():

    ledger, book = Ledger(), SequenceBook()
    first = _noted(book, ledger, "t", 0, [b"a", b"b"], [[], []], seq=0)
    second = _noted(book, ledger, "t", 0, [b"c"], [[]], seq=2)
    assert [book.message_at("t", 0, 7, 0, s) for s in range(4)] == [*first.ids, *second.ids, None]
    assert book.message_at("t", 0, 7, 1, 0) is None  # another epoch: another numbering
    ledger.settle([Outcome(list(first.ids), "t", 0, 10)])
    book.prune(ledger.open_positions)
    assert book.message_at("t", 0, 7, 0, 0) is None and book.message_at("t", 0, 7, 0, 2) == second.ids[0]
    assert set(book.scan_plan(ledger.open_positions)) == {("t", 0)}


def _mock_write(conn, topic: str, partition: int, values: list[bytes], pid: int, epoch: int, seq: int,
                timestamp: int) -> int:
    """Produce one batch; its error code."""
    from raykafka.wire import messages
    from raykafka.wire.record_encoding import encode_record_batch

    batch = encode_record_batch(values, timestamps=timestamp, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": topic, "partition_data": [
        {"index": partition, "records": batch}]}]}
    return conn.request(messages.PRODUCE, body)


def test_the_scan_bumps_the_epoch_and_skips_older_data_and_the_window_until_the_resend_lands(monkeypatch):
    """On the mock cluster, which bumps an idempotent producer's epoch (KIP-360) as Kafka does:
    - another producer's older records before ours are not read (the scan starts at the first
      offset stamped at or after our oldest message's time, less CLOCK_SKEW_MS);
    - the heal gets the old id with the next epoch;
    - a dead Flusher's request that lands after the scan, before the heal's first write of the
      new epoch there, is still written (the window, bounded by the resend); one that lands
      after it is refused INVALID_PRODUCER_EPOCH."""
    import asyncio
    import time

    from raykafka.driver import producer_log_match as producer_heal
    from raykafka.driver.producer_log_match import PartitionScan, read_log
    from raykafka.mock import MockCluster
    from raykafka.wire import fetch, messages
    from raykafka.wire.cluster import Cluster
    from raykafka.wire.config import parse_config
    from raykafka.wire.errors import BY_NAME

    monkeypatch.setattr(producer_heal, "SETTLE_S", 0.05)
    now = int(time.time() * 1000)
    starts: list[int] = []
    real = fetch.records_of_producer

    async def counted(cluster, topic, partition, start, writers, max_decompressed):
        starts.append(start)
        return await real(cluster, topic, partition, start, writers, max_decompressed)

    monkeypatch.setattr(fetch, "records_of_producer", counted)
    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        config = parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}"})

        async def run(step):
            cluster = Cluster(config)
            try:
                return await step(cluster)
            finally:
                await cluster.close()

        async def before(cluster):
            conn = await cluster.leader_connection("t", 0)
            init = {"transactional_id": None, "transaction_timeout_ms": 60000}
            other = await conn.request(messages.INIT_PRODUCER_ID, init)
            ours = await conn.request(messages.INIT_PRODUCER_ID, init)
            for i in range(50):  # an hour old, another producer's
                r = await _mock_write(conn, "t", 0, [b"old"] * 10, other.producer_id, 0, i * 10, now - 3_600_000)
                assert r.responses[0].partition_responses[0].error_code == 0
            r = await _mock_write(conn, "t", 0, [b"ours"], ours.producer_id, 0, 0, now)
            assert r.responses[0].partition_responses[0].error_code == 0
            return ours.producer_id

        pid = asyncio.run(run(before))
        plan = {("t", 0): PartitionScan(frozenset({(pid, 0)}), now)}
        read = read_log(config, plan, {}, bump=(pid, 0))
        assert read.bumped == (pid, 1)
        assert [(r.offset, r.value, r.sequence) for r in read.records[("t", 0)]] == [(500, b"ours", 0)]
        assert starts[0] == 500  # 500 records of the other producer were never read

        async def after(cluster):
            conn = await cluster.leader_connection("t", 0)
            late = await _mock_write(conn, "t", 0, [b"late"], pid, 0, 1, now)  # before the resend: written
            resend = await _mock_write(conn, "t", 0, [b"again"], pid, 1, 0, now)
            later = await _mock_write(conn, "t", 0, [b"later"], pid, 0, 2, now)  # after it: fenced
            return [x.responses[0].partition_responses[0].error_code for x in (late, resend, later)]

        assert asyncio.run(run(after)) == [0, 0, BY_NAME["INVALID_PRODUCER_EPOCH"].code]
        assert mock.handler_errors == []


def test_a_scan_that_cannot_settle_raises_rather_than_passing_for_complete(monkeypatch):
    """A log that keeps taking the old producer's records past request.timeout.ms: the read
    raises HealScanIncomplete; what it found so far is never returned as the whole."""
    import pytest

    from raykafka.driver import producer_log_match as producer_heal
    from raykafka.driver.producer_log_match import HealScanIncomplete, PartitionScan, read_log
    from raykafka.mock import MockCluster
    from raykafka.wire import fetch
    from raykafka.wire.config import parse_config

    monkeypatch.setattr(producer_heal, "SETTLE_S", 0.05)
    offsets = iter(range(10**6))

    async def always_more(cluster, topic, partition, start, writers, max_decompressed):
        return [WrittenRecord(next(offsets), 0, None, b"x", 7, 0, 0)]

    monkeypatch.setattr(fetch, "records_of_producer", always_more)
    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        config = parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}", "request.timeout.ms": 1000})
        with pytest.raises(HealScanIncomplete, match="request.timeout.ms=1000"):
            read_log(config, {("t", 0): PartitionScan(frozenset({(7, 0)}), 0)}, {}, bump=None)


def test_a_new_id_for_a_bump_is_not_taken_for_a_fence(monkeypatch):
    """Kafka's coordinator answers InitProducerId without a transactional.id with a new producer
    id, whatever id and epoch it is given: that fences nothing, and the heal says so (None)."""
    from raykafka.driver.producer_log_match import read_log
    from raykafka.mock import MockCluster
    from raykafka.wire import producer_id
    from raykafka.wire.config import parse_config

    async def a_new_id(cluster, bump=None):
        return (bump[0] + 1, 0)

    monkeypatch.setattr(producer_id, "init_producer_id", a_new_id)
    with MockCluster(n_brokers=1, topics={"t": 1}) as mock:
        config = parse_config({"bootstrap.servers": f"127.0.0.1:{mock.brokers[1].port}"})
        assert read_log(config, {}, {}, bump=(7, 3)).bumped is None
