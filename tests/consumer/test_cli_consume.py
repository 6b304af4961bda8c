"""`raykafka consume` as a user runs it: a subprocess against tansu."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.broker]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "raykafka.driver.cli", "consume", *args]


@pytest.fixture(scope="module")
def topic(bootstrap, kit):
    import uuid

    name = f"cli-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, name, 2)
    kit.produce(bootstrap, name, [{"value": b"v%d" % i, "key": b"k%d" % i, "partition": i % 2,
                                   "headers": [("h", b"%d" % i)], "timestamp": 1_700_000_000_000 + i}
                                  for i in range(10)])
    return name


@pytest.mark.ray
def test_exit_at_end_prints_every_message_as_json(bootstrap, topic):
    r = subprocess.run(cli("-b", bootstrap, "-t", topic, "-e", "-f", "json"), capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted((row["partition"], row["offset"]) for row in rows) == [(p, o) for p in (0, 1) for o in range(5)]
    by_value = {row["value"]: row for row in rows}
    assert by_value["v3"] == {"topic": topic, "partition": 1, "offset": 1, "key": "k3", "value": "v3",
                              "timestamp": 1_700_000_000_003, "headers": [["h", "3"]]}


@pytest.mark.ray
def test_count_stops_after_count_messages(bootstrap, topic):
    r = subprocess.run(cli("-b", bootstrap, "-t", topic, "-c", "3", "-o", "2"), capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3
    assert set(r.stdout.split()) <= {f"v{i}" for i in range(4, 10)}, "starts at offset 2 of each partition"


def test_group_runs_until_sigterm_then_commits_what_it_printed(bootstrap, topic):
    from confluent_kafka import Consumer, TopicPartition

    group = f"cli-group-{topic}"
    proc = subprocess.Popen(cli("-b", bootstrap, "-t", topic, "-g", group, "-X", "session.timeout.ms=6000",
                                "-X", "heartbeat.interval.ms=500"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(10)]
        assert sorted(lines) == sorted(f"v{i}" for i in range(10))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == ""
    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = ck.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        ck.close()
    assert [tp.offset for tp in committed] == [5, 5]


def test_group_exits_non_zero_naming_a_fatal_error(kit, tmp_path):
    """Only a fatal error ends `consume -g`: here the coordinator fences the static member."""
    import time

    from raykafka.wire import messages
    from raykafka.wire.group_coordinator import FENCED_INSTANCE_ID
    from raykafka.wire.mock_broker import MockCluster

    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"one"])
        with open(tmp_path / "err", "w") as err:
            proc = subprocess.Popen(cli("-b", cluster.bootstrap, "-t", "t", "-g", "fenced", "-X", "group.instance.id=i-1",
                                        "-X", "heartbeat.interval.ms=100", "-X", "session.timeout.ms=6000"),
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout.readline().strip() == "one"
            cluster.set_handler(messages.HEARTBEAT, lambda v, body, b: {"throttle_time_ms": 0,
                                                                        "error_code": FENCED_INSTANCE_ID})
            started = time.monotonic()
            proc.wait(60)
            ended_in = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = (tmp_path / "err").read_text()
    assert proc.returncode == 1, stderr
    said = [line for line in stderr.splitlines() if line.startswith("raykafka: ")]
    assert len(said) == 1 and "FENCED_INSTANCE_ID" in said[0], stderr
    assert ended_in < 30
