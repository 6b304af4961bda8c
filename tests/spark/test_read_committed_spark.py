"""read_kafka under isolation.level: a transactional raykafka Producer commits, aborts and commits
on tansu; a read_committed DataFrame holds exactly the committed messages, a read_uncommitted one
the aborted ones too (tansu 0.6.0 serves aborted records to every reader)."""

from __future__ import annotations

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer
from raykafka.spark_bridge import read_kafka

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.spark, pytest.mark.timeout(300)]


def test_read_kafka_reads_exactly_the_committed_messages_under_read_committed(spark, bootstrap, topic_name):
    topic = topic_name("spark-rc")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    outcome = {"first": True, "aborted": False, "second": True}
    rows = {name: [f"{name}-{i}".encode() for i in range(50)] for name in outcome}
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"}) as producer:
        producer.init_transactions()
        for name, commit in outcome.items():
            producer.begin_transaction()
            futures = [producer.send(topic, v, key=v) for v in rows[name]]
            (producer.commit_transaction if commit else producer.abort_transaction)(60)
            assert all(f.result(0).offset >= 0 for f in futures)

    def values(isolation: str) -> list[bytes]:
        df = read_kafka(spark, topic, config={"bootstrap.servers": bootstrap, "isolation.level": isolation})
        return sorted(bytes(r["value"]) for r in df.select("value").collect())

    assert values("read_committed") == sorted(rows["first"] + rows["second"])
    assert values("read_uncommitted") == sorted(v for vs in rows.values() for v in vs)
