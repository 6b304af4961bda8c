"""`raykafka produce`: stdin lines in (bytes as they are, streamed in bounded memory), a summary on
stderr, exit status 0 only when all arrived."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raykafka.app import cli
from raykafka.driver.admin import Admin

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(180)]


def run(monkeypatch, argv: list[str], text: str) -> int:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    return cli.main(argv)


def test_produce_lines_with_keys_and_a_summary(ray_session, bootstrap, topic_name, monkeypatch, capsys):
    from confluent_kafka import Consumer, TopicPartition

    """With Ray initialized here, the lines go through a `Producer` (never the in-process pipeline)."""
    from raykafka.driver import local_pipeline

    def no_local_pipeline(config):
        raise AssertionError("Ray runs here: the lines go through a Producer")

    monkeypatch.setattr(local_pipeline, "LocalPipeline", no_local_pipeline)
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


def raykafka(*args: str, **popen) -> subprocess.Popen:
    """The installed entry point (as a user runs it) in a subprocess."""
    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    return subprocess.Popen([*command, *args], **popen)


def read_back(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got += [(m.key(), m.value()) for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    return got


def test_lines_that_are_not_utf8_are_sent_as_the_bytes_they_are(bootstrap, topic_name):
    topic = topic_name("cli-bytes")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    lines = [b"plain", b"latin-1 caf\xe9", b"\xff\xfe\x00binary", b"k\xff:v\xfe", b"crlf\r"]
    proc = raykafka("produce", "-t", topic, "-b", bootstrap, "-K", ":", stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(b"\n".join(lines) + b"\n", timeout=180)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert b"5 delivered, 0 failed of 5 lines" in err
    assert read_back(bootstrap, topic, 5) == [(None, b"plain"), (None, b"latin-1 caf\xe9"), (None, b"\xff\xfe\x00binary"),
                                              (b"k\xff", b"v\xfe"), (None, b"crlf")]


IN_PROCESS = ("import sys, ray\n"
              "from raykafka.app.cli import main\n"
              "code = main(sys.argv[1:])\n"
              "print('ray initialized:', ray.is_initialized(), file=sys.stderr)\n"
              "sys.exit(code)\n")


def produce_without_ray(*args: str, lines: bytes) -> subprocess.CompletedProcess:
    """`raykafka produce` in a process with no Ray cluster to join; says on stderr whether Ray
    was initialized by the end."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-c", IN_PROCESS, "produce", *args], input=lines, capture_output=True,
                          timeout=120, env=env)


def read_partitions(bootstrap: str, topic: str, partitions: int, n: int) -> dict[tuple[bytes | None, bytes], int]:
    """Every (key, value) read back from the topic, with the partition it is in."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict = {}
    try:
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got.update({(m.key(), m.value()): m.partition() for m in consumer.consume(100, timeout=0.5)
                        if m.error() is None})
    finally:
        consumer.close()
    return got


def test_without_a_ray_to_join_produces_in_process_and_starts_no_ray(bootstrap, topic_name):
    """With no Ray cluster to join, `produce` runs the pipeline's stages in this process and never
    initializes Ray: keyed lines land in the partition the Producer's partitioner picks, -p puts
    every line in its partition, and a line that cannot be written ends with its cause (exit 1)."""
    from raykafka.wire.config import parse_config
    from raykafka.wire.partitioners import get_partitioner

    topic = topic_name("cli-here")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 3})
    lines = [b"k%d:v%d" % (i % 7, i) for i in range(300)] + [b"no key %d" % i for i in range(3)]
    r = produce_without_ray("-b", bootstrap, "-t", topic, "-K", ":", "-X", "linger.ms=1",
                            lines=b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"ray initialized: False" in r.stderr and b"303 delivered, 0 failed of 303 lines" in r.stderr, r.stderr
    got = read_partitions(bootstrap, topic, 3, 303)
    assert len(got) == 303
    config = parse_config({"bootstrap.servers": bootstrap}, role="producer")
    partitioner = get_partitioner(config["partitioner"], config["sticky.partitioning.linger.ms"])
    keys = [b"k%d" % k for k in range(7)]
    expected = dict(zip(keys, partitioner.partition_many(keys, 3), strict=True))
    assert all(got[(key, value)] == expected[key] for key, value in got if key is not None), got

    pinned = topic_name("cli-here-p")
    with Admin(bootstrap) as admin:
        admin.create_topics({pinned: 3})
    r = produce_without_ray("-b", bootstrap, "-t", pinned, "-p", "2", lines=b"a\nb\nc\n")
    assert r.returncode == 0 and b"ray initialized: False" in r.stderr, r.stderr
    assert set(read_partitions(bootstrap, pinned, 3, 3).values()) == {2}

    r = produce_without_ray("-b", bootstrap, "-t", pinned, "-p", "7", lines=b"a\nb\n")
    assert r.returncode == 1 and b"0 delivered, 2 failed of 2 lines" in r.stderr, r.stderr
    assert b"has no partition 7" in r.stderr and b"ray initialized: False" in r.stderr

    r = produce_without_ray("-b", bootstrap, "-t", topic_name("absent"), lines=b"a\nb\n")
    assert r.returncode == 1 and b"0 delivered, 2 failed of 2 lines" in r.stderr, r.stderr
    assert b"does not exist" in r.stderr and b"ray initialized: False" in r.stderr


def test_a_line_from_a_slow_pipe_is_delivered_before_the_pipe_closes(bootstrap, topic_name):
    """`(echo a; sleep 30; echo b) | raykafka produce`: `a` can be read back from the topic while
    the writer still holds the pipe open, as with kcat, not only once `b` or the end comes."""
    topic = topic_name("cli-slow-pipe")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-c", IN_PROCESS, "produce", "-b", bootstrap, "-t", topic],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        proc.stdin.write(b"a\n")
        proc.stdin.flush()
        assert read_back(bootstrap, topic, 1) == [(None, b"a")]
        assert proc.poll() is None, "still reading its open stdin"
        proc.stdin.write(b"b\n")
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode(errors="replace")
    assert b"2 delivered, 0 failed of 2 lines" in err, err
    assert read_back(bootstrap, topic, 2) == [(None, b"a"), (None, b"b")]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.timeout(300)
def test_endless_input_streams_through_in_bounded_memory(tmp_path):
    """256 MB of 64 KB lines, then 8 million one-byte lines, through a pipe: the process's memory
    does not grow with the input. Reading lines far ahead of buffer.memory would grow it by the
    long lines' 256 MB; keeping every line's result, by 20-odd bytes a line (100 MB or more over
    the last 4 million lines). Its own broker, so the session's keeps no 300 MB."""
    from raykafka.driver.embedded_broker import EmbeddedBroker

    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics({"endless": 2})
        with open(tmp_path / "stderr", "wb") as err:
            proc = raykafka("produce", "-b", broker.bootstrap, "-t", "endless", stdin=subprocess.PIPE, stderr=err)
            try:
                long_line, short_lines = b"y" * (64 * 1024 - 1) + b"\n", b"x\n" * 100_000
                long_phase, short_phase = [], []
                for i in range(4096):  # 256 MB
                    proc.stdin.write(long_line)
                    if i % 256 == 255:
                        long_phase.append(rss_mb(proc.pid))
                for _ in range(80):  # 8,000,000 lines
                    proc.stdin.write(short_lines)
                    short_phase.append(rss_mb(proc.pid))
                proc.stdin.close()
                assert proc.wait(timeout=180) == 0, (tmp_path / "stderr").read_text(errors="replace")[-2000:]
            finally:
                if proc.poll() is None:
                    proc.kill()
        summary = (tmp_path / "stderr").read_text(errors="replace")
        assert "8004096 delivered, 0 failed of 8004096 lines" in summary, summary[-2000:]
        seen = f"RSS (MB) every 16 MB of long lines {[round(m) for m in long_phase]}, " \
               f"every 100,000 short lines {[round(m) for m in short_phase]}"
        assert max(long_phase) - long_phase[1] < 128, seen  # from 32 MB in, when the producer is up
        assert max(short_phase[40:]) - short_phase[39] < 48, seen  # over the last 4 million lines
