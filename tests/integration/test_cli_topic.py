"""`raykafka topic` as a user types it, flags first or last (kafka-topics and kcat habits): the
installed entry point in a subprocess, against tansu; `delete-records`, which tansu 0.6 cannot
take, also in this process against the mock cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raykafka.driver.admin import Admin
from raykafka.mock import MockCluster
from raykafka.wire import messages


def raykafka(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def listed(bootstrap: str) -> dict[str, int]:
    r = raykafka("topic", "-b", bootstrap, "list")
    assert r.returncode == 0, r.stderr
    return {name: int(n) for name, n in (line.split("\t") for line in r.stdout.splitlines())}


@pytest.mark.broker
def test_create_with_flags_before_the_name_list_and_delete(bootstrap, topic_name):
    first, second = topic_name("cli-topic"), topic_name("cli-topic")
    r = raykafka("topic", "create", "-b", bootstrap, first, "-p", "6")
    assert r.returncode == 0, r.stderr
    r = raykafka("-b", bootstrap, "topic", "-p", "2", "create", second)
    assert r.returncode == 0, r.stderr
    topics = listed(bootstrap)
    assert (topics[first], topics[second]) == (6, 2)
    r = raykafka("topic", "delete", first, "-b", bootstrap, second)
    assert r.returncode == 0, r.stderr
    assert not {first, second} & set(listed(bootstrap))


@pytest.mark.broker
def test_a_missing_name_is_a_usage_error_naming_the_command(bootstrap):
    r = raykafka("topic", "-b", bootstrap, "create", "-p", "3")
    assert r.returncode == 2
    assert "topic create needs at least one topic name" in r.stderr


@pytest.mark.broker
def test_alter_config_sets_and_deletes_keys_and_a_missing_topic_exits_1(bootstrap, topic_name):
    name = topic_name("cli-config")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 1}, config={"retention.ms": "86400000", "cleanup.policy": "delete"})
        r = raykafka("topic", "alter-config", name, "-b", bootstrap, "-c", "retention.ms=3600000",
                     "--delete", "cleanup.policy")
        assert r.returncode == 0 and f"altered configs of {name}" in r.stderr, r.stderr
        assert {k: c.value for k, c in admin.describe_configs(name)[name].items()} == {"retention.ms": "3600000"}
    missing = topic_name("missing")
    r = raykafka("topic", "alter-config", missing, "-b", bootstrap, "-c", "retention.ms=1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and f"topic '{missing}' does not exist" in r.stderr, r.stderr


@pytest.mark.broker
def test_delete_records_on_tansu_exits_1_naming_the_call(bootstrap, topic_name):
    name = topic_name("cli-records")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 2})
    r = raykafka("topic", "delete-records", name, "-b", bootstrap, "--before", "0")
    assert r.returncode == 1 and r.stderr.startswith("raykafka: delete records on broker"), r.stderr


def test_delete_records_prints_each_partitions_low_watermark(capsys):
    from confluent_kafka import Producer

    from raykafka.app.cli import main

    with MockCluster(1, {"t": 3}) as mock:
        producer = Producer({"bootstrap.servers": mock.bootstrap})
        for i in range(3):
            producer.produce("t", b"%d" % i, partition=1)
        assert producer.flush(30) == 0
        assert main(["topic", "delete-records", "t", "-b", mock.bootstrap, "--before", "0"]) == 0
        out, err = capsys.readouterr()
        assert out == "t\t0\t0\nt\t1\t0\nt\t2\t0\n" and "in 3 partitions" in err
        assert main(["topic", "delete-records", "t", "-p", "1", "--before", "-1", "-b", mock.bootstrap]) == 0
        assert capsys.readouterr().out == "t\t1\t3\n"
        assert [len(r.topics[0].partitions) for r in mock.requests(messages.DELETE_RECORDS)] == [3, 1]
        assert main(["topic", "delete-records", "t", "-p", "1", "--before", "4", "-b", mock.bootstrap]) == 1
        err = capsys.readouterr().err
        assert err == ("raykafka: delete records of t/1 before 4: OFFSET_OUT_OF_RANGE (1): "
                       f"{_description('OFFSET_OUT_OF_RANGE')}\n"), err
        assert main(["topic", "delete-records", "nope", "--before", "1", "-b", mock.bootstrap]) == 1
        assert "topic 'nope' does not exist" in capsys.readouterr().err


def _description(name: str) -> str:
    from raykafka.wire.errors import BY_NAME

    return BY_NAME[name].description
