"""`raykafka consume` against tansu: as a user runs it, a subprocess (without Ray, in a group,
under signals), and its `main()` in this process for what only the output shows."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from raykafka.app.cli import main

pytestmark = [pytest.mark.broker]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "raykafka.app.cli", "consume", *args]


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
def test_exit_at_end_prints_every_message_as_json(bootstrap, topic, ray_session, capsys):
    """In this process, on the module's Ray (the subprocess form is the test without Ray below)."""
    assert main(["consume", "-b", bootstrap, "-t", topic, "-e", "-f", "json"]) == 0
    out, _ = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted((row["partition"], row["offset"]) for row in rows) == [(p, o) for p in (0, 1) for o in range(5)]
    by_value = {row["value"]: row for row in rows}
    assert by_value["v3"] == {"topic": topic, "partition": 1, "offset": 1, "key": "k3", "value": "v3",
                              "timestamp": 1_700_000_000_003, "headers": [["h", "3"]]}


def test_exit_at_end_without_a_ray_to_join_reads_in_process_and_starts_no_ray(bootstrap, topic):
    """`consume -e` with no Ray cluster to join reads here (a terminal command does not start a
    whole Ray): every message, deserialized as asked, and Ray never initialized in the process;
    a topic that does not exist is said at once."""
    script = ("import sys, ray\n"
              "from raykafka.app.cli import main\n"
              "code = main(sys.argv[1:])\n"
              "print('ray initialized:', ray.is_initialized(), file=sys.stderr)\n"
              "sys.exit(code)\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    r = subprocess.run([sys.executable, "-c", script, "consume", "-b", bootstrap, "-t", topic, "-e", "-o", "2",
                        "-X", "key.deserializer=str", "-f", "%p %o %k\\n"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "ray initialized: False" in r.stderr and "raykafka: 6 messages" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"{p} {o} k{2 * o + p}" for p in (0, 1) for o in (2, 3, 4)]
    missing = subprocess.run([sys.executable, "-c", script, "consume", "-b", bootstrap, "-t", f"no-{uuid.uuid4().hex[:6]}",
                              "-e"], capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert "ray initialized: False" in missing.stderr


@pytest.mark.ray
def test_count_stops_after_count_messages(bootstrap, topic, ray_session, capsys):
    assert main(["consume", "-b", bootstrap, "-t", topic, "-c", "3", "-o", "2"]) == 0
    out, _ = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert set(out.split()) <= {f"v{i}" for i in range(4, 10)}, "starts at offset 2 of each partition"


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


def raykafka(*args: str) -> list[str]:
    return [sys.executable, "-m", "raykafka.app.cli", *args]


def committed(bootstrap: str, group: str, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in ck.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)]
    finally:
        ck.close()


class Lines:
    """A pipe's lines, read by a thread, awaited with a deadline."""

    def __init__(self, stream):
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f"no line with {needle!r}; saw {self.seen[-10:]}")
            self.seen.append(line)
            if needle in line:
                return line

    def rest(self) -> list[str]:
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
        return self.seen


def test_a_second_interrupt_does_not_cut_the_commit_short(bootstrap, topic):
    """Ctrl-C starts the clean shutdown; a second Ctrl-C while it runs only says so: the member
    still leaves, commits what it printed and exits 0."""
    group = f"cli-twice-{topic}"
    proc = subprocess.Popen(raykafka("consume", "-b", bootstrap, "-t", topic, "-g", group, "-X", "session.timeout.ms=6000",
                                     "-X", "heartbeat.interval.ms=500"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        printed = sorted(out.wait_for("v") for _ in range(10))
        assert printed == sorted(f"v{i}" for i in range(10))
        proc.send_signal(signal.SIGINT)
        err.wait_for("raykafka: stopping: leaving the group and committing what was printed")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, err.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.rest()
    assert any(line.startswith("raykafka: still stopping") for line in lines), lines  # the second was heard
    assert "raykafka: 10 messages" in lines
    assert committed(bootstrap, group, topic) == [5, 5]


def test_group_exit_at_end_on_a_missing_topic_ends_with_an_error(bootstrap):
    missing = f"cli-missing-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(raykafka("consume", "-g", "g-missing", "-e", "-t", missing, "-b", bootstrap), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert f"raykafka: topic '{missing}' does not exist" in r.stderr


@pytest.mark.ray
def test_deserialized_values_print_as_json_options_before_the_command(bootstrap, kit, ray_session, capsys):
    topic = f"cli-json-{uuid.uuid4().hex[:8]}"
    kit.create_topic(bootstrap, topic, 1)
    kit.produce(bootstrap, topic, [{"key": b"k%d" % i, "value": json.dumps({"n": i}).encode()} for i in range(3)])
    assert main(["-b", bootstrap, "-X", "value.deserializer=json", "-f", "json", "consume", "-t", topic,
                 "-e", "-X", "key.deserializer=str"]) == 0
    out, _ = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(row["key"], row["value"]) for row in rows] == [("k0", {"n": 0}), ("k1", {"n": 1}), ("k2", {"n": 2})]


def test_group_exits_non_zero_naming_a_fatal_error(kit, tmp_path):
    """Only a fatal error ends `consume -g`: here the coordinator fences the static member."""
    import time

    from raykafka.mock import MockCluster
    from raykafka.wire import messages
    from raykafka.wire.group_coordinator import FENCED_INSTANCE_ID

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


@pytest.mark.ray
def test_in_process_one_message_and_an_offset_past_every_end_are_said(bootstrap, topic, ray_session, capsys):
    """`raykafka consume` in this process (its Consumer's actors on the module's Ray): `-c 1` says
    `1 message`; `-o 5000 -e`, past the end (5) of both partitions, prints nothing, exits 0 and
    says on stderr that the offset is past the end."""
    assert main(["consume", "-b", bootstrap, "-t", topic, "-c", "1"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err.splitlines()[-1] == "raykafka: 1 message", err
    assert main(["consume", "-b", bootstrap, "-t", topic, "-o", "5000", "-e"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"raykafka: offset 5000 is past the end of every partition of {topic} (ends: 0:5, 1:5)" in err, err
    assert err.splitlines()[-1] == "raykafka: 0 messages"


@pytest.fixture(scope="module")
def pattern_topics(bootstrap, kit):
    """Topics for `-t '^<prefix>-.*'`: two it matches (two partitions and one) and two it does
    not (the prefix alone, and a name that only contains a match); 6 records each, the value
    naming its topic. Returns the prefix."""
    prefix = f"cli-pat-{uuid.uuid4().hex[:6]}"
    for name, partitions in {f"{prefix}-a": 2, f"{prefix}-b": 1, prefix: 1, f"x-{prefix}-c": 1}.items():
        kit.create_topic(bootstrap, name, partitions)
        kit.produce(bootstrap, name, [{"value": f"{name}/{i}".encode(), "partition": i % partitions}
                                      for i in range(6)])
    return prefix


def matched(prefix: str) -> list[str]:
    """What `-f '%t %s\\n'` prints of the pattern's topics, sorted."""
    return sorted(f"{t} {t}/{i}" for t in (f"{prefix}-a", f"{prefix}-b") for i in range(6))


def test_a_pattern_reads_every_matching_topic_to_its_end_in_process(bootstrap, pattern_topics):
    """`consume -t '^prefix-.*' -e` with no Ray to join: every record of the two topics that
    match, none of the others; a pattern that matches nothing is an error with -e, as a missing
    topic is, and one that is no regular expression a usage error."""
    prefix = pattern_topics
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    script = ("import sys, ray\n"
              "from raykafka.app.cli import main\n"
              "code = main(sys.argv[1:])\n"
              "print('ray initialized:', ray.is_initialized(), file=sys.stderr)\n"
              "sys.exit(code)\n")
    r = subprocess.run([sys.executable, "-c", script, "consume", "-b", bootstrap, "-t", f"^{prefix}-.*", "-e",
                        "-f", "%t %s\\n"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "ray initialized: False" in r.stderr and "raykafka: 12 messages" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == matched(prefix)
    r = subprocess.run([sys.executable, "-c", script, "consume", "-b", bootstrap, "-t", f"^{prefix}-z.*", "-e"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and f"no topic matches the pattern '^{prefix}-z.*'" in r.stderr, r.stderr
    r = subprocess.run(cli("-b", bootstrap, "-t", "^orders-(", "-e"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "is not a regular expression" in r.stderr, r.stderr


def test_a_group_subscribed_to_a_pattern_reads_every_matching_topic_to_its_end(bootstrap, pattern_topics):
    prefix = pattern_topics
    group = f"cli-pat-group-{prefix}"
    r = subprocess.run(cli("-b", bootstrap, "-t", f"^{prefix}-.*", "-g", group, "-e", "-f", "%t %s\\n",
                           "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == matched(prefix)
    assert committed(bootstrap, group, f"{prefix}-a") == [3, 3]
    r = subprocess.run(cli("-b", bootstrap, "-t", f"^{prefix}-z.*", "-g", group, "-e"), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and f"no topic matches the pattern '^{prefix}-z.*'" in r.stderr, r.stderr


@pytest.mark.ray
def test_a_consumer_assigned_a_pattern_reads_every_matching_topic(bootstrap, pattern_topics, ray_session, capsys):
    """`consume -t '^prefix-.*'` through a `Consumer` (Ray runs here): -e reads both matching
    topics to their ends, -o past a topic's ends says so for that topic, -c stops on a count."""
    from raykafka.app.cli import main

    prefix = pattern_topics
    assert main(["consume", "-b", bootstrap, "-t", f"^{prefix}-.*", "-e", "-f", "%t %s\\n"]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == matched(prefix), err
    assert main(["consume", "-b", bootstrap, "-t", f"^{prefix}-.*", "-o", "5", "-e"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{prefix}-b/5"], "the one record at offset 5 or after"
    assert f"offset 5 is past the end of every partition of {prefix}-a (ends: 0:3, 1:3)" in err, err
    assert f"{prefix}-b" not in err, "its one partition ends at 6"
    assert main(["consume", "-b", bootstrap, "-t", f"^{prefix}-.*", "-c", "4", "-f", "%t\\n"]) == 0
    out, _ = capsys.readouterr()
    assert len(out.splitlines()) == 4 and set(out.split()) <= {f"{prefix}-a", f"{prefix}-b"}
