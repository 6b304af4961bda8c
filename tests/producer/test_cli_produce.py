"""`raykafka produce`: stdin lines in, a summary on stderr, exit status 0 only when all arrived."""

from __future__ import annotations

import io

import pytest

from raykafka.driver import cli
from raykafka.driver.admin import Admin

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(180)]


def run(monkeypatch, argv: list[str], text: str) -> int:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    return cli.main(argv)


def test_produce_lines_with_keys_and_a_summary(ray_session, bootstrap, topic_name, monkeypatch, capsys):
    from confluent_kafka import Consumer, TopicPartition

    topic = topic_name("cli")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    lines = [f"k{i % 3}:value {i}:with colon" for i in range(50)] + ["no separator here"]
    assert run(monkeypatch, ["produce", "-b", bootstrap, "-t", topic, "-K", ":", "-X", "linger.ms=1"],
               "\n".join(lines) + "\n") == 0
    assert "51 delivered, 0 failed of 51 lines" in capsys.readouterr().err
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    for _ in range(20):
        got += [(m.key(), m.value()) for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        if len(got) >= 51:
            break
    consumer.close()
    assert got[0] == (b"k0", b"value 0:with colon")
    assert got[-1] == (None, b"no separator here")
    assert len(got) == 51


def test_produce_to_a_missing_topic_exits_non_zero(ray_session, bootstrap, topic_name, monkeypatch, capsys):
    status = run(monkeypatch, ["produce", "-b", bootstrap, "-t", topic_name("absent")], "a\nb\n")
    assert status == 1
    err = capsys.readouterr().err
    assert "0 delivered, 2 failed of 2 lines" in err and "does not exist" in err
