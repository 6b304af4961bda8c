"""`raykafka metadata` and `raykafka group` as a user runs them (kcat -L and kafka-consumer-groups
habits): the installed entry point in a subprocess, against tansu. No Ray."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raykafka.driver.admin import Admin
from raykafka.wire.admin import TopicPartition

pytestmark = [pytest.mark.broker]

T0 = 1_700_000_000_000  # the records' timestamps: T0 + 1000 * offset


def raykafka(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture()
def topic(bootstrap, topic_name):
    """A topic of 3 partitions holding 10 records in each, at offsets 0-9 stamped T0 + 1000 * offset."""
    from confluent_kafka import Producer

    name = topic_name("cli-admin")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 3})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(3):
        for i in range(10):
            producer.produce(name, b"v%d" % i, partition=p, timestamp=T0 + 1000 * i)
    assert producer.flush(30) == 0
    return name


def test_metadata_lists_brokers_topics_and_partitions_as_text_and_json(bootstrap, topic):
    r = raykafka("metadata", "-b", bootstrap, "-t", topic)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Metadata for '{topic}' (from {bootstrap}")
    assert lines[1] == " 1 brokers:" and "(controller)" in lines[2]
    assert f'  topic "{topic}" with 3 partitions' in lines
    assert sum(line.startswith("    partition ") for line in lines) == 3

    r = raykafka("-f", "json", "metadata", "-t", topic, "-b", bootstrap)  # options before the command too
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    (broker,) = found["brokers"]
    assert found["controller_id"] == broker["id"] and f"{broker['host']}:{broker['port']}" == bootstrap
    (described,) = found["topics"]
    assert described["topic"] == topic and described["error"] is None
    assert [(p["partition"], p["leader"], p["replicas"], p["error"]) for p in described["partitions"]] == [
        (p, broker["id"], [broker["id"]], None) for p in range(3)]

    everything = json.loads(raykafka("metadata", "-b", bootstrap, "-f", "json").stdout)
    assert topic in {t["topic"] for t in everything["topics"]}


def test_metadata_of_a_missing_topic_names_the_error_and_exits_1(bootstrap, topic_name):
    missing = topic_name("cli-missing")
    r = raykafka("metadata", "-b", bootstrap, "-t", missing, "-f", "json")
    assert r.returncode == 1, r.stderr
    (described,) = json.loads(r.stdout)["topics"]
    assert (described["topic"], described["error"]) == (missing, "UNKNOWN_TOPIC_OR_PARTITION")


def test_group_list_describe_reset_and_delete_an_empty_group(bootstrap, topic, topic_name):
    group = topic_name("cli-g")
    with Admin(bootstrap) as admin:
        admin.alter_offsets(group, {(topic, 0): 4, (topic, 1): 10})

    r = raykafka("group", "list", "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    assert group in {line.split("\t")[0] for line in r.stdout.splitlines()}
    assert group in {g["group"] for g in json.loads(raykafka("group", "list", "-b", bootstrap, "-f", "json").stdout)}

    r = raykafka("group", "describe", group, "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    assert f"Consumer group '{group}' has no active members" in r.stderr
    header, *rows = [line.split() for line in r.stdout.splitlines()]
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                      "CLIENT-ID"]
    assert rows == [[group, topic, "0", "4", "10", "6", "-", "-", "-"], [group, topic, "1", "10", "10", "0", "-", "-", "-"]]
    described = json.loads(raykafka("group", "describe", "-f", "json", group, "-b", bootstrap).stdout)
    assert [(o["partition"], o["committed"], o["end"], o["lag"]) for o in described["offsets"]] == [
        (0, 4, 10, 6), (1, 10, 10, 0)]

    # a dry run by default: it shows the new offsets and commits nothing
    r = raykafka("group", "reset-offsets", group, "-b", bootstrap, "--all-topics", "--to-earliest")
    assert r.returncode == 0, r.stderr
    assert [line.split() for line in r.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert "dry run, nothing committed" in r.stderr
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(group) == {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 10}

    # --execute commits: to a time, on partitions named after the topic, then to an offset
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((T0 + 6000) / 1000)) + "+00:00"
    r = raykafka("group", "reset-offsets", group, "-t", f"{topic}:0,2", "--to-datetime", at, "--execute", "-b", bootstrap,
                 "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"group": group, "executed": True, "offsets": [
        {"topic": topic, "partition": 0, "offset": 6}, {"topic": topic, "partition": 2, "offset": 6}]}
    r = raykafka("group", "reset-offsets", group, "-t", topic, "--to-offset", "99", "--execute", "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(group) == {TopicPartition(topic, p): 10 for p in range(3)}  # clamped to the end

    r = raykafka("group", "delete", group, "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    with Admin(bootstrap) as admin:
        assert admin.committed_offsets(group) == {}


def test_a_group_with_a_member_shows_it_and_refuses_reset_and_delete(bootstrap, topic, topic_name, wait_for):
    from confluent_kafka import Consumer

    group = topic_name("cli-active")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    try:
        seen: list = []
        wait_for(lambda: seen.extend(m for m in consumer.consume(10, timeout=0.5) if m.error() is None) or seen,
                 timeout=60)
        consumer.commit(asynchronous=False)

        r = raykafka("group", "describe", group, "-b", bootstrap)
        assert r.returncode == 0, r.stderr
        assert f"Consumer group '{group}': Stable, 1 member," in r.stderr
        described = json.loads(raykafka("group", "describe", group, "-b", bootstrap, "-f", "json").stdout)
        (member,) = described["members"]
        assert member["member_id"] == consumer.memberid()  # (tansu 0.6 gives no client id and no assignment)

        r = raykafka("group", "reset-offsets", group, "-b", bootstrap, "-t", topic, "--to-earliest", "--execute")
        assert r.returncode == 1
        assert "Stable with 1 member(s); stop its consumers first" in r.stderr
        r = raykafka("group", "delete", group, "-b", bootstrap)
        assert r.returncode == 1 and "stop its consumers first" in r.stderr
    finally:
        consumer.close()


@pytest.mark.parametrize("line, says", [
    (["group", "reset-offsets", "g", "-t", "x", "--to-earliest", "--to-latest"], "exactly one of --to-earliest"),
    (["group", "reset-offsets", "g", "--to-earliest"], "-t TOPIC[:PARTITIONS] or --all-topics"),
    (["group", "reset-offsets", "g", "-t", "x", "--to-latest", "--dry-run", "--execute"], "exclude each other"),
    (["group", "reset-offsets", "g", "-t", "x:a", "--to-latest"], "partitions are numbers"),
    (["group", "reset-offsets", "g", "-t", "x", "--to-datetime", "yesterday"], "ISO-8601"),
    (["group", "describe"], "group describe needs at least one group id"),
    (["metadata", "-X", "no.such.property=1"], "no.such.property"),
    (["metadata", "-X", "novalue"], "-X takes key=value"),
])
def test_a_line_that_cannot_work_exits_2_naming_why(bootstrap, line, says):
    r = raykafka(*line, "-b", bootstrap)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """`raykafka ARGS` in this process (the group commands start no Ray): status, stdout, stderr."""
    from raykafka.app.cli import main

    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_group_that_does_not_exist_is_an_error_to_describe_and_to_delete(bootstrap, capsys):
    missing = f"no-such-group-{time.monotonic_ns()}"
    status, out, err = run_cli(capsys, "group", "describe", missing, "-b", bootstrap)
    assert (status, out) == (1, "") and f"group '{missing}'" in err and "GROUP_ID_NOT_FOUND" in err, err
    status, _, err = run_cli(capsys, "group", "delete", missing, "-b", bootstrap)
    assert status == 1 and "GROUP_ID_NOT_FOUND" in err, err
    status, _, err = run_cli(capsys, "group", "delete", missing, "-b", bootstrap, "--if-exists")
    assert status == 0, err


def test_list_and_describe_name_a_groups_state_alike(bootstrap, topic, capsys):
    group = f"cli-state-{time.monotonic_ns()}"
    with Admin(bootstrap) as admin:
        admin.alter_offsets(group, {(topic, 0): 4})
    status, out, err = run_cli(capsys, "group", "list", "-b", bootstrap)
    assert status == 0, err
    (listed,) = [line.split("\t") for line in out.splitlines() if line.startswith(group + "\t")]
    status, out, err = run_cli(capsys, "group", "describe", group, "-b", bootstrap)
    assert status == 0, err
    assert f"Consumer group '{group}' has no active members ({listed[1]})." in err
    assert listed[1] == "Empty"
    status, out, _ = run_cli(capsys, "group", "list", "-b", bootstrap, "-f", "json")
    assert [g["state"] for g in json.loads(out) if g["group"] == group] == ["Empty"]
    status, _, err = run_cli(capsys, "group", "delete", group, "-b", bootstrap)  # it exists: deleted
    assert status == 0, err
