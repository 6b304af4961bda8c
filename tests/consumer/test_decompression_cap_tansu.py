"""On tansu: `max.decompressed.batch.bytes` reaches the partition consumers. A compressed batch
that inflates past it fails its partition with an error naming the key; the default reads it."""

from __future__ import annotations

import pytest

from raykafka.driver.consumer import Consumer, ConsumerError

pytestmark = [pytest.mark.broker, pytest.mark.ray]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_batch_inflating_past_the_cap_fails_its_partition(bootstrap, ray_session, kit, topic_name, codec):
    topic = topic_name("cap")
    kit.create_topic(bootstrap, topic, 1)
    values = [bytes([65 + i]) * 100_000 for i in range(4)]  # each record alone inflates past the cap
    kit.produce(bootstrap, topic, [{"value": v, "partition": 0} for v in values], **{"compression.type": codec})
    with Consumer({"bootstrap.servers": bootstrap, "max.decompressed.batch.bytes": 65536}) as consumer:
        consumer.assign(topic, 0, "earliest")
        with pytest.raises(ConsumerError, match=rf"{topic}/0.*RecordBatchTooLargeError.*inflates past 65536 bytes "
                                                r"\(max.decompressed.batch.bytes\)"):
            consumer.read_all(timeout=60)
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        consumer.assign(topic, 0, "earliest")
        assert consumer.read_all(timeout=60).column("value").to_pylist() == values
