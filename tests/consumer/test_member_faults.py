"""A group member under faults, run in-process (`MemberRuntime`, no Ray) against the mock cluster
or a scripted coordinator: a corrupt batch or an out-of-range offset with auto.offset.reset=none
fails that partition alone; heartbeats go on while a session waits for a slow handler; only
fatal errors (FENCED_INSTANCE_ID, the handler policy) end the member; a join rides out any
number of connection failures; reconnects wait `reconnect.backoff.ms` growing to
`reconnect.backoff.max.ms`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator

import pytest

from raykafka.actors.group_member_state import MemberRuntime
from raykafka.driver.embedded_broker import free_port
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster, ReconnectBackoff
from raykafka.wire.config import parse_config
from raykafka.wire.errors import BrokerConnectionError, BrokerError, ConsumerError
from raykafka.wire.group_coordinator import FENCED_INSTANCE_ID, GroupCoordinator

FAST = {"heartbeat.interval.ms": 100, "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 50, "auto.commit.interval.ms": 200, "retry.backoff.ms": 20}


class Seen:
    """What a handler got, by partition (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.values: dict[int, list[bytes]] = {}

    def add(self, batch) -> None:
        with self.lock:
            p = batch.column("partition")[0].as_py()
            self.values.setdefault(p, []).extend(batch.column("value").to_pylist())

    def count(self, p: int) -> int:
        with self.lock:
            return len(self.values.get(p, []))


def commit_offset(cluster: MockCluster, group_id: str, topic: str, partition: int, offset: int) -> None:
    """Commit an offset for the group as an admin does (no member, no generation)."""
    async def go():
        wire = Cluster(parse_config({"bootstrap.servers": cluster.bootstrap}))
        try:
            await GroupCoordinator(wire, parse_config({"bootstrap.servers": "x:1", "group.id": group_id}),
                                   [topic]).commit({(topic, partition): offset})
        finally:
            await wire.close()

    asyncio.run(go())


@contextlib.contextmanager
def member(config: dict, handler, **kw) -> Iterator[MemberRuntime]:
    """A started member of topic "t", stopped on the way out (while its broker still runs)."""
    runtime = MemberRuntime(config, ["t"], handler, **kw)
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop(30)


def test_a_corrupt_batch_fails_its_partition_alone(kit, caplog):
    """Partition 1's second batch has a flipped byte: t/1 hands out its first batch, then ends with
    a ConsumerError naming it and the CRC, logged at ERROR; partitions 0 and 2 are read to the
    end, in the same fetches."""
    seen = Seen()
    with MockCluster(n_brokers=1, topics={"t": 3}) as cluster:
        for p in range(3):
            kit.mock_produce(cluster, "t", p, [b"%d-%03d" % (p, i) for i in range(300)], per_batch=100)
        with cluster.lock:
            raw = bytearray(cluster.topics["t"].partitions[1].batches[1])
            raw[-3] ^= 0xFF  # inside the last record: covered by the batch CRC
            cluster.topics["t"].partitions[1].batches[1] = bytes(raw)
        with caplog.at_level(logging.ERROR, logger="raykafka.actors.group_member"), \
                member({"bootstrap.servers": cluster.bootstrap, "group.id": "corrupt", **FAST}, seen.add) as runtime:
            kit.wait_for(lambda: seen.count(0) == 300 and seen.count(2) == 300 and runtime.status()["failed_partitions"],
                         timeout=30, what="partitions 0 and 2 read, t/1 failed")
            failed = runtime.status()["failed_partitions"]
            assert list(failed) == ["t/1"] and "CRC" in failed["t/1"], failed
            assert "record batch at offset 100 failed its CRC" in failed["t/1"], failed
            assert seen.values[1] == [b"1-%03d" % i for i in range(100)], "the batch before it, nothing from it on"
            assert isinstance(runtime.session._claims[("t", 1)].error, ConsumerError)
            assert any("t/1" in r.getMessage() and "CRC" in r.getMessage() for r in caplog.records)
            assert runtime.fatal is None, "the member goes on"
            fetches = len(cluster.requests(messages.FETCH))
            kit.mock_produce(cluster, "t", 0, [b"late"])
            kit.wait_for(lambda: seen.count(0) == 301, timeout=10, what="partition 0 still flowing")
            asked = {p.partition for r in cluster.requests(messages.FETCH)[fetches:] for t in r.topics
                     for p in t.partitions}
            assert 1 not in asked, "the failed partition is not fetched again"


def test_out_of_range_with_reset_none_fails_the_partition_alone(kit):
    seen = Seen()
    with MockCluster(n_brokers=1, topics={"t": 3}) as cluster:
        for p in range(3):
            kit.mock_produce(cluster, "t", p, [b"%d-%d" % (p, i) for i in range(50)])
        for p in range(3):
            commit_offset(cluster, "none", "t", p, 5000 if p == 1 else 0)
        with member({"bootstrap.servers": cluster.bootstrap, "group.id": "none", **FAST,
                     "auto.offset.reset": "none"}, seen.add) as runtime:
            kit.wait_for(lambda: seen.count(0) == 50 and seen.count(2) == 50 and runtime.status()["failed_partitions"],
                         timeout=30, what="partitions 0 and 2 read, t/1 failed")
            failed = runtime.status()["failed_partitions"]
            assert list(failed) == ["t/1"], failed
            assert "5000" in failed["t/1"] and "auto.offset.reset=none" in failed["t/1"]
            assert [e.kind for e in runtime.errors] == ["partition"]
            assert runtime.fatal is None


def test_heartbeats_go_on_while_the_session_waits_for_a_slow_handler(kit):
    """The member is told to stop while its handler is in the middle of a batch: until the
    handler returns, heartbeats keep the membership; then its mark is committed."""
    release, busy = threading.Event(), threading.Event()

    def handle(batch):
        busy.set()
        release.wait(60)

    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"v%d" % i for i in range(10)])
        runtime = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "slow", **FAST,
                                 "enable.auto.commit": False}, ["t"], handle)
        runtime.start()
        assert busy.wait(30)
        before = len(cluster.requests(messages.HEARTBEAT))
        stopper = threading.Thread(target=runtime.stop, args=(60,))
        stopper.start()
        try:
            kit.wait_for(lambda: len(cluster.requests(messages.HEARTBEAT)) >= before + 5, timeout=10,
                         what="heartbeats while the session waits for its handler")
        finally:
            release.set()
            stopper.join(60)
        assert not stopper.is_alive()
        assert runtime.session.committed == {("t", 0): 10}, "the slow batch's mark was committed"


def test_a_fenced_static_member_ends_and_says_why(kit):
    seen = Seen()
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"a"])
        with member({"bootstrap.servers": cluster.bootstrap, "group.id": "fence", **FAST,
                     "group.instance.id": "static-1"}, seen.add) as runtime:
            kit.wait_for(lambda: seen.count(0) == 1, timeout=30, what="the member consuming")
            cluster.set_handler(messages.HEARTBEAT, lambda v, body, b: {"throttle_time_ms": 0,
                                                                        "error_code": FENCED_INSTANCE_ID})
            kit.wait_for(lambda: runtime._future.done(), timeout=30, what="the member to end")
            assert runtime.fatal is not None and "FENCED_INSTANCE_ID" in runtime.fatal, runtime.fatal
            assert [e.kind for e in runtime.errors][-1] == "fatal"


def test_a_handler_that_keeps_failing_ends_the_member_after_the_policy_allows(kit):
    calls = []

    def handle(batch):
        calls.append(batch.num_rows)
        raise RuntimeError("cannot handle this")

    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"x"])
        with member({"bootstrap.servers": cluster.bootstrap, "group.id": "bad", **FAST}, handle,
                    max_handler_failures=3) as runtime:
            kit.wait_for(lambda: runtime._future.done(), timeout=60, what="the member to end")
            assert len(calls) == 3, "the batch came again after each failure, three times in all"
            assert "failed 3 times in a row" in runtime.fatal and "cannot handle this" in runtime.fatal
            assert [e.kind for e in runtime.errors] == ["handler", "handler", "handler", "fatal"]


def test_a_setup_error_ends_the_session_not_the_member(kit):
    seen = Seen()

    class Handler:
        setups = 0

        def setup(self, session):
            Handler.setups += 1
            if Handler.setups == 1:
                raise RuntimeError("first setup fails")

        def consume_claim(self, session, claim):
            for batch in claim.batches():
                seen.add(batch)
                session.mark_batch(batch)

        def cleanup(self, session):
            pass

    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"s%d" % i for i in range(5)])
        with member({"bootstrap.servers": cluster.bootstrap, "group.id": "setup", **FAST}, Handler()) as runtime:
            kit.wait_for(lambda: seen.count(0) == 5, timeout=30, what="the batches after the second setup")
            assert runtime.fatal is None and runtime.generations >= 2
            assert runtime.errors[0].kind == "handler" and "first setup fails" in runtime.errors[0].cause


# -- riding out a broker outage ---------------------------------------------------------------


class DownCluster:
    """A cluster whose coordinator cannot be reached `down` times, then answers."""

    def __init__(self, conn, down: int):
        self.conn, self.down = conn, down
        self.metadata = None

    async def coordinator(self, group_id):
        if self.down:
            self.down -= 1
            raise BrokerConnectionError("cannot connect to 127.0.0.1:9: connection refused")
        return self.conn

    def forget_coordinator(self, group_id):
        pass


class JoinOnly:
    def version_for(self, api):
        return 5

    async def request(self, api, body, version=None, timeout=None):
        from raykafka.wire.assignors import encode_assignment
        from raykafka.wire.protocol import Struct

        if api is messages.JOIN_GROUP:
            return Struct({"error_code": 0, "member_id": "m", "leader": "x", "generation_id": 3,
                           "protocol_name": "range", "members": []})
        return Struct({"error_code": 0, "assignment": encode_assignment({"t": [0]})})


def test_a_join_rides_out_any_number_of_connection_failures():
    config = parse_config({"bootstrap.servers": "x:1", "group.id": "g"})
    sleeps = []

    async def sleep(s):
        sleeps.append(s)

    coordinator = GroupCoordinator(DownCluster(JoinOnly(), down=50), config, ["t"], sleep=sleep)
    generation = asyncio.run(coordinator.join())
    assert generation.generation_id == 3 and generation.claims == {"t": [0]}
    assert len(sleeps) == 50


def test_a_fatal_join_error_is_not_retried():
    class Fenced(JoinOnly):
        async def request(self, api, body, version=None, timeout=None):
            from raykafka.wire.protocol import Struct

            return Struct({"error_code": FENCED_INSTANCE_ID, "member_id": "", "leader": "", "generation_id": -1,
                           "protocol_name": None, "members": []})

    config = parse_config({"bootstrap.servers": "x:1", "group.id": "g", "group.instance.id": "i"})
    with pytest.raises(BrokerError, match="FENCED_INSTANCE_ID"):
        asyncio.run(GroupCoordinator(DownCluster(Fenced(), down=0), config, ["t"]).join())


def test_reconnect_backoff_doubles_from_its_start_to_its_max_with_jitter():
    backoff = ReconnectBackoff(100, 1000, jitter=random.Random(1))
    now, waits = 0.0, []
    for _ in range(8):
        now += backoff.wait(now)
        waits.append(backoff.attempt(now))
    bases = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for wait, base in zip(waits, bases, strict=True):
        assert base * 0.75 <= wait <= min(base * 1.5, 1.0), (wait, base)
    assert backoff.backoff == 1.0
    backoff.attempt(now + 60)  # left alone longer than the max: back to the start
    assert backoff.backoff == 0.2


def test_reconnecting_to_a_dead_port_waits_the_configured_backoff():
    """Both keys at work: attempts to a port nobody listens on are spaced by at least 3/4 of
    reconnect.backoff.ms=100 doubling up to reconnect.backoff.max.ms=400."""
    port = free_port()
    cluster = Cluster(parse_config({"bootstrap.servers": f"127.0.0.1:{port}", "reconnect.backoff.ms": 100,
                                    "reconnect.backoff.max.ms": 400}))

    async def attempts(n: int) -> float:
        start = time.monotonic()
        for _ in range(n):
            with pytest.raises(BrokerConnectionError, match="no bootstrap server reachable"):
                await cluster.any_connection()
        return time.monotonic() - start

    elapsed = asyncio.run(attempts(6))
    backoff = cluster.backoffs[(-1, "127.0.0.1", port, "")]
    assert backoff.attempts == 6 and backoff.backoff == 0.4
    assert elapsed >= 0.75 * (0.1 + 0.2 + 0.4 + 0.4 + 0.4), elapsed


def test_a_heartbeat_that_swallows_its_cancel_cannot_hold_a_stop(kit):
    """Python 3.11's wait_for can lose a cancel that meets a response; the heartbeat loop must
    end on the member's leaving all the same, so that a stop ends in bounded time."""
    with MockCluster(n_brokers=1, topics={"t": 1}) as cluster:
        kit.mock_produce(cluster, "t", 0, [b"a"])
        seen = Seen()
        runtime = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "swallow", **FAST}, ["t"],
                                seen.add)
        beats = []

        async def heartbeat():
            beats.append(1)
            try:
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:  # swallowed, as a lost cancel would be
                pass

        runtime.coordinator.heartbeat = heartbeat
        runtime.start()
        kit.wait_for(lambda: seen.count(0) == 1 and len(beats) >= 3, timeout=30, what="consuming, heartbeating")
        started = time.monotonic()
        runtime.stop(30)
        assert time.monotonic() - started < 10
        assert runtime.fatal is None, runtime.fatal
