"""On tansu: `max.decompressed.batch.bytes` reaches the partition consumers. A compressed batch
that inflates past it fails its partition with an error naming the key; the default reads it.
Many batches, each under it, are bounded together (`record_batch_reader.InflationBudget`): per partition in
a `Consumer`, per Fetch answer in a group member."""

from __future__ import annotations

import pytest

from raykafka.driver.consumer import Consumer, ConsumerError
from raykafka.driver.consumer_group import ConsumerGroup

pytestmark = [pytest.mark.broker, pytest.mark.ray]

CAP = 65536  # the tests' max.decompressed.batch.bytes


def refused_then_read(bootstrap: str, topic: str, values: list[bytes], refusal: str) -> None:
    """Partition 0 of `topic` fails under the cap with an error matching `refusal`; at the default
    cap it reads as `values`."""
    with Consumer({"bootstrap.servers": bootstrap, "max.decompressed.batch.bytes": CAP}) as consumer:
        consumer.assign(topic, 0, "earliest")
        with pytest.raises(ConsumerError, match=rf"{topic}/0.*{refusal}"):
            consumer.read_all(timeout=60)
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        consumer.assign(topic, 0, "earliest")
        assert consumer.read_all(timeout=60).column("value").to_pylist() == values


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_batch_inflating_past_the_cap_fails_its_partition(bootstrap, ray_session, kit, topic_name, codec):
    topic = topic_name("cap")
    kit.create_topic(bootstrap, topic, 1)
    values = [bytes([65 + i]) * 100_000 for i in range(4)]  # each record alone inflates past the cap
    kit.produce(bootstrap, topic, [{"value": v, "partition": 0} for v in values], **{"compression.type": codec})
    refused_then_read(bootstrap, topic, values, rf"RecordBatchTooLargeError.*inflates past {CAP} bytes "
                                                r"\(max.decompressed.batch.bytes\)")


def test_many_batches_each_under_the_cap_fail_their_partition_together(bootstrap, ray_session, kit, topic_name):
    """Twenty zstd batches of 60,000 zero bytes, a batch each (some 2 KB on the wire), against a
    batch cap of 65536: each batch alone is allowed, together they inflate past what one
    partition's part of a fetch may (the cap plus MAX_INFLATION times its bytes), and the
    partition fails naming that bound; the default cap reads them all."""
    topic = topic_name("bombs")
    kit.create_topic(bootstrap, topic, 1)
    values = [bytes(60_000)] * 20
    kit.produce(bootstrap, topic, [{"value": v, "partition": 0} for v in values],
                **{"compression.type": "zstd", "batch.num.messages": 1})
    refused_then_read(bootstrap, topic, values, r"DecompressedFetchTooLargeError.*this partition's part of the fetch "
                                                rf"may inflate to: max.decompressed.batch.bytes \({CAP}\) plus "
                                                r"MAX_INFLATION \(100\)")


@pytest.mark.slow  # 25 s, most of it tansu's JoinGroup wait; the default tier keeps the cap on the consumer
def test_a_group_member_bounds_the_partitions_of_one_answer_together(bootstrap, ray_session, kit, topic_name):
    """Two partitions of one zstd batch of 60,000 zero bytes each, against a batch cap of 65536:
    a `Consumer` reads each partition in an actor of its own, each within its own budget; a group
    member decodes both from one Fetch answer, whose budget (the cap plus MAX_INFLATION times the
    answer's few hundred bytes) does not hold both, and the partition decoded second fails naming it."""
    topic, group_id = topic_name("answer"), topic_name("g")
    kit.create_topic(bootstrap, topic, 2)
    values = [bytes(60_000), bytes(60_000)]
    kit.produce(bootstrap, topic, [{"value": v, "partition": p} for p, v in enumerate(values)],
                **{"compression.type": "zstd"})
    config = {"bootstrap.servers": bootstrap, "max.decompressed.batch.bytes": CAP}
    with Consumer(config) as consumer:
        consumer.assign_topic(topic, "earliest")
        assert consumer.read_all(timeout=60).num_rows == 2
    group = ConsumerGroup({**config, "group.id": group_id, "auto.offset.reset": "earliest"}, [topic],
                          lambda batch: None)
    try:
        kit.wait_for(lambda: [e for e in group.errors() if e.kind == "partition"], timeout=60,
                     what="a partition failed")
        (failed,) = [e for e in group.errors() if e.kind == "partition"]
        assert "DecompressedFetchTooLargeError" in failed.cause and "this fetch answer may inflate to" in failed.cause
        with pytest.raises(ConsumerError, match=rf"{topic}/[01]: .*max.decompressed.batch.bytes \({CAP}\) plus "
                                                r"MAX_INFLATION \(100\)"):
            group.check()
    finally:
        group.close()
