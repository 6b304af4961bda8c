"""What a producer heals from, without Ray: the batches it keeps until their messages end, and
which unanswered messages the log already holds (driver/producer_heal.py)."""

from __future__ import annotations

from concurrent.futures import Future

from raykafka.actors.batch import MessageBatch
from raykafka.actors.producer_results import Outcome
from raykafka.driver.producer_heal import KeptBatches, acked_ends, written_outcomes
from raykafka.driver.producer_ledger import Ledger
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


def test_acked_ends_keep_the_furthest_acknowledged_offset_of_each_partition():
    ends: dict = {}
    acked_ends(ends, [Outcome(range(0, 3), "t", 0, 10), Outcome(range(3, 4), "t", 0, 5),
                      Outcome.failed([5], RuntimeError("x"), "t", 1), Outcome(range(6, 8), "t", 1, -1)])
    assert ends == {("t", 0): 13}


def test_the_log_is_read_again_for_records_that_land_after_the_first_read(monkeypatch):
    """A dead Flusher's last request reaches the broker after the healer's first read of the
    log (here: written between the first read and the next, on the mock cluster): the read
    again finds it, so its messages are not sent a second time."""
    import asyncio

    from raykafka.driver import producer_heal
    from raykafka.mock import MockCluster
    from raykafka.wire import fetch, messages
    from raykafka.wire.cluster import Cluster
    from raykafka.wire.config import parse_config
    from raykafka.wire.records import encode_record_batch

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
        written = producer_heal.scan_written(config, producer.producer_id, [MessageBatch(topic="t")], {})
        assert [r.value for r in written[("t", 0)]] == [b"a", b"b", b"c"]
        assert reads == [0, 2, 3]  # from the start, then past what each read found, until one finds nothing
        assert mock.handler_errors == []

