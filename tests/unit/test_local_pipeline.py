"""`LocalPipeline` (driver/local_pipeline.py), the producer's stages in one process without Ray,
against the scripted mock cluster: a retriable answer and a leader that moved go round the retry
loop (FlusherState → RetryQueue → LeaderDispatcherState, chaser and all) and every message ends
once, written in order; a partition the topic does not have fails with its cause."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.local_pipeline import LocalPipeline
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.errors import BY_NAME

TOPIC = "local"
PARTITIONS = 2
NOT_LEADER = BY_NAME["NOT_LEADER_OR_FOLLOWER"].code


def end_all(pipeline: LocalPipeline, outcomes: list, timeout: float = 30.0) -> list:
    deadline = time.monotonic() + timeout
    while pipeline.pending() and time.monotonic() < deadline:
        outcomes += pipeline.wait_outcomes(0.5)
    assert not pipeline.pending(), f"{pipeline.pending()} messages never ended"
    return outcomes


@pytest.mark.parametrize("idempotence", ["true", "false"])
def test_retries_and_a_moved_leader_go_round_in_process_and_keep_order(idempotence):
    with MockCluster(n_brokers=2, topics={TOPIC: PARTITIONS}) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 1, "retry.backoff.ms": 10,
                  "enable.idempotence": idempotence}
        with LocalPipeline(config) as pipeline:
            outcomes = pipeline.send_batch(TOPIC, [b"a%d" % i for i in range(50)], partitions=[0] * 50)
            outcomes = end_all(pipeline, outcomes)
            old = cluster.leader(TOPIC, 0)
            cluster.fail_next(messages.PRODUCE, NOT_LEADER, 2, node_id=old)
            new = next(n for n in cluster.brokers if n != old)
            cluster.move_leader(TOPIC, 0, new)
            for i in range(5):
                outcomes += pipeline.send_batch(TOPIC, [b"b%d-%d" % (i, j) for j in range(20)],
                                                keys=[b"k%d" % j for j in range(20)])
            outcomes = end_all(pipeline, outcomes)
            assert cluster.requests(messages.PRODUCE, node_id=new), "partition 0's retries went to its new leader"
            assert cluster.faults["error/Produce/NOT_LEADER_OR_FOLLOWER"] >= 1, cluster.faults
        ended = sum(len(o.ids) for o in outcomes)
        assert ended == 150 and all(o.error is None for o in outcomes), [o.error for o in outcomes if o.error]
        log = {p: [r.value for r in cluster.records(TOPIC, p)] for p in range(PARTITIONS)}
        assert sum(map(len, log.values())) == 150, "each written once"
        for p, values in log.items():  # each partition's messages in the order they were sent
            sent = [v for v in values if v.startswith(b"b")]
            assert sent == sorted(sent, key=lambda v: tuple(map(int, v[1:].split(b"-")))), p
        assert log[0][:50] == [b"a%d" % i for i in range(50)]


def test_a_partition_the_topic_does_not_have_fails_with_its_cause():
    with MockCluster(n_brokers=1, topics={TOPIC: PARTITIONS}) as cluster, \
            LocalPipeline({"bootstrap.servers": cluster.bootstrap}) as pipeline:
        outcomes = end_all(pipeline, pipeline.send_batch(TOPIC, [b"x", b"y"], partitions=[5, 1]))
        failed = [o for o in outcomes if o.error is not None]
        assert [len(o.ids) for o in failed] == [1] and "has no partition 5" in str(failed[0].error)
        assert sum(len(o.ids) for o in outcomes if o.error is None) == 1


def test_a_message_larger_than_max_request_size_fails_alone_before_it_is_sent():
    with MockCluster(n_brokers=1, topics={TOPIC: 1}) as cluster, \
            LocalPipeline({"bootstrap.servers": cluster.bootstrap, "max.request.size": 1024}) as pipeline:
        outcomes = end_all(pipeline, pipeline.send_batch(TOPIC, [b"small", b"x" * 2000, b"small too"]))
        failed = [o for o in outcomes if o.error is not None]
        assert [list(o.ids) for o in failed] == [[1]] and "larger than max.request.size=1024" in str(failed[0].error)
        assert [r.value for r in cluster.records(TOPIC, 0)] == [b"small", b"small too"]


def test_a_new_message_waiting_behind_a_slow_chaser_fails_as_not_delivered_at_its_deadline():
    """Partition 0 moves to another broker while its old one answers slowly behind a queue of
    partition 1's requests: the chaser sent down the old path comes back only after that queue.
    A message sent to partition 0 meanwhile waits behind the retry. Its delivery.timeout.ms runs
    out first: it fails then, as not delivered and naming why, and is not in the log (it was
    written late, after its time, before the LeaderDispatcher had a deadline of its own)."""
    from raykafka.wire.errors import DeliveryTimeoutError

    with MockCluster(n_brokers=2, topics={TOPIC: 2}) as cluster:
        old = cluster.leader(TOPIC, 0)
        cluster.move_leader(TOPIC, 1, old)
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retry.backoff.ms": 10,
                  "request.timeout.ms": 1000, "delivery.timeout.ms": 1000, "batch.size": 64,
                  "max.in.flight.requests.per.connection": 1}
        with LocalPipeline(config) as pipeline:
            outcomes = end_all(pipeline, pipeline.send_batch(TOPIC, [b"first"], partitions=[0]))
            cluster.delay(messages.PRODUCE, 0.3, node_id=old)  # a queue forms there
            cluster.fail_next(messages.PRODUCE, NOT_LEADER, 1, node_id=old, topic=TOPIC, partition=0)
            cluster.move_leader(TOPIC, 0, next(n for n in cluster.brokers if n != old))
            outcomes += pipeline.send_batch(TOPIC, [b"retried"], partitions=[0])
            waited = time.monotonic() + 10
            while pipeline.partitions[(TOPIC, 0)].retry_level == 0:  # until "retried" comes back
                assert time.monotonic() < waited, "partition 0 never went round the retry loop"
                outcomes += pipeline.send_batch(TOPIC, [b"queue"], partitions=[1])
                time.sleep(0.03)
            late = pipeline.next_id
            outcomes += pipeline.send_batch(TOPIC, [b"new"], partitions=[0])
            outcomes = end_all(pipeline, outcomes)
        [new] = [o for o in outcomes if late in list(o.ids)]
        assert type(new.error) is DeliveryTimeoutError and not new.error.possibly_written, new.error
        assert "waiting behind a retry of local/0" in str(new.error)
        assert [r.value for r in cluster.records(TOPIC, 0)] == [b"first", b"retried"]
        assert sum(len(o.ids) for o in outcomes) == pipeline.next_id  # every message ended once


def test_a_retry_the_broker_may_have_written_held_for_a_leader_ends_as_outcome_unknown():
    """The broker writes a message and the connection drops before its answer; then no leader is
    found for its partition until its delivery.timeout.ms runs out. It is in the log: its error
    must say it may be (it said "not delivered" before, with `possibly_written` False)."""
    from raykafka.wire.errors import OutcomeUnknownError

    with MockCluster(n_brokers=1, topics={TOPIC: 1}) as cluster:
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "retry.backoff.ms": 10,
                  "request.timeout.ms": 1000, "delivery.timeout.ms": 1500, "enable.idempotence": "false"}
        with LocalPipeline(config) as pipeline:
            outcomes = end_all(pipeline, pipeline.send_batch(TOPIC, [b"a"]))
            cluster.drop_after_request(messages.PRODUCE, 1, apply=True)  # written, then no answer
            cluster.fail_next(messages.METADATA, BY_NAME["LEADER_NOT_AVAILABLE"].code, 10_000, topic=TOPIC)
            outcomes = end_all(pipeline, outcomes + pipeline.send_batch(TOPIC, [b"b"]))
        assert [r.value for r in cluster.records(TOPIC, 0)] == [b"a", b"b"]
        [held] = [o for o in outcomes if o.error is not None]
        assert isinstance(held.error, OutcomeUnknownError) and held.error.possibly_written, held.error
        assert "no leader for local/0" in str(held.error)


def test_the_local_retry_handler_answers_every_call_a_flusher_makes_to_the_retry_handler():
    """A Flusher calls `ctx.retry_handler.<name>.remote(...)`; in this process those calls go to
    `LocalRetryHandler`, which must have each (a renamed call once raised AttributeError at close,
    after a broker outage, with a traceback on the command's stderr)."""
    import re
    from pathlib import Path

    from raykafka.actors import flusher
    from raykafka.driver.local_pipeline import LocalRetryHandler

    called = set(re.findall(r"retry_handler\.(\w+)\.remote", Path(flusher.__file__).read_text()))
    assert called, "the Flusher calls the RetryHandler"
    local = LocalRetryHandler(queue=None)
    assert {name for name in called if not hasattr(local, name)} == set()


def test_a_table_of_kafka_sink_columns_goes_in_with_its_keys_headers_and_timestamps():
    """What a `Producer.send_batch` takes, the in-process pipeline takes: a pyarrow table with
    `key`, `value`, `headers` and `timestamp`; each record is written with all four."""
    import pyarrow as pa

    table = pa.table({
        "key": [b"k%d" % i for i in range(6)],
        "value": [b"v%d" % i for i in range(6)],
        "headers": [[{"key": "source", "value": b"h%d" % i}] for i in range(6)],
        "timestamp": pa.array([1_700_000_000_000 + i for i in range(6)], pa.timestamp("ms", tz="UTC")),
    })
    with MockCluster(n_brokers=1, topics={TOPIC: 1}) as cluster, \
            LocalPipeline({"bootstrap.servers": cluster.bootstrap, "linger.ms": 1}) as pipeline:
        outcomes = end_all(pipeline, pipeline.send_batch(TOPIC, table))
        assert sum(len(o.ids) for o in outcomes) == 6 and all(o.error is None for o in outcomes)
        records = cluster.records(TOPIC, 0)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (b"k%d" % i, b"v%d" % i, [("source", b"h%d" % i)], 1_700_000_000_000 + i) for i in range(6)]


def test_a_topic_column_a_wrong_column_or_no_topic_is_refused_before_anything_is_counted():
    import pyarrow as pa

    with MockCluster(n_brokers=1, topics={TOPIC: 1}) as cluster, \
            LocalPipeline({"bootstrap.servers": cluster.bootstrap}) as pipeline:
        with pytest.raises(ValueError, match="topic column"):
            pipeline.send_batch(TOPIC, pa.table({"value": [b"a"], "topic": [TOPIC]}))
        with pytest.raises(ValueError, match="keys has 1 entries for 2 values"):
            pipeline.send_batch(TOPIC, [b"a", b"b"], keys=[b"k"])
        with pytest.raises(ValueError, match="keys has 1 entries for 0 values"):
            pipeline.send_batch(TOPIC, [], keys=[b"k"])
        with pytest.raises(ValueError, match=r"timestamps\[1\]"):  # before 1970: counted nowhere
            pipeline.send_batch(TOPIC, [b"a", b"b"], timestamps=[1, -5])
        with pytest.raises(ValueError, match="partitions must be between 0"):  # counted before the mend
            pipeline.send_batch(TOPIC, [b"a"], partitions=[-5])
        with pytest.raises(TypeError, match="topic must be a non-empty str"):
            pipeline.send_batch("", [b"a"])
        assert pipeline.pending() == 0 and pipeline.buffered == 0
        assert not cluster.requests(messages.PRODUCE)
