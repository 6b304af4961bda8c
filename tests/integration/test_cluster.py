"""The connection, cluster client and Admin against the real broker (tansu) over TCP."""

import asyncio
import subprocess
import sys

import pytest

from raykafka.driver.admin import Admin
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.connection import BrokerConnection
from raykafka.wire.errors import BrokerConnectionError, BrokerError, UnknownTopicError

pytestmark = [pytest.mark.broker]


def run(coro):
    return asyncio.run(coro)


def test_connection_negotiates_versions_and_pipelines_requests(broker):
    async def scenario():
        conn = await BrokerConnection(broker.host, broker.port).connect()
        try:
            assert conn.versions[messages.PRODUCE.key][1] >= 9
            assert conn.version_for(messages.METADATA) == min(conn.versions[3][1], messages.METADATA.max_version)
            # Many requests in flight at once, each matched to its own response.
            futures = [conn.send_nowait(messages.METADATA, {"topics": [], "allow_auto_topic_creation": False})
                       for _ in range(50)]
            responses = await asyncio.gather(*(conn.wait(f, messages.METADATA) for f in futures))
            assert len(responses) == 50
            assert all(r.brokers[0].port == broker.port for r in responses)
        finally:
            await conn.close()

    run(scenario())


def test_pending_requests_fail_clearly_when_the_connection_drops():
    async def scenario():
        # A server that reads the request and hangs up without answering.
        async def hang_up(reader, writer):
            await reader.read(4)
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port)
        with pytest.raises(BrokerConnectionError, match="closed by the broker"):
            await conn.connect()
        server.close()
        with pytest.raises(BrokerConnectionError, match="cannot connect"):
            await BrokerConnection("127.0.0.1", port).connect()

    run(scenario())


def test_cluster_metadata_leaders_and_coordinator(bootstrap, topic_name):
    name = topic_name("meta")
    with Admin(bootstrap) as admin:
        admin.create_topics({name: 4})
        assert admin.list_topics()[name] == 4

    async def scenario():
        cluster = Cluster(parse_config({"bootstrap.servers": bootstrap}))
        try:
            info = await cluster.topic(name)
            assert sorted(info.partitions) == [0, 1, 2, 3]
            leader = cluster.metadata.leader(name, 2)
            assert leader in cluster.metadata.brokers
            conn = await cluster.leader_connection(name, 2)
            assert conn.node_id == leader
            coordinator = await cluster.coordinator("some-group")
            assert coordinator.connected
            with pytest.raises(UnknownTopicError, match="does not exist"):
                await cluster.topic(topic_name("missing"))
        finally:
            await cluster.close()

    run(scenario())


def test_admin_create_delete_and_errors_name_the_topic(bootstrap, topic_name):
    name = topic_name("adm")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([name], num_partitions=2)
        with pytest.raises(BrokerError, match=f"{name}.*TOPIC_ALREADY_EXISTS"):
            admin.create_topics([name])
        admin.create_topics([name], exist_ok=True)
        admin.delete_topics([name])
        assert name not in admin.list_topics()


def test_cli_topic_commands(bootstrap, topic_name):
    name = topic_name("cli")
    cli = [sys.executable, "-m", "raykafka.app.cli"]
    created = subprocess.run([*cli, "topic", "create", name, "-p", "3", "-b", bootstrap],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([*cli, "topic", "list", "-b", bootstrap], capture_output=True, text=True, timeout=60)
    assert f"{name}\t3" in listed.stdout.splitlines()
    again = subprocess.run([*cli, "topic", "create", name, "-b", bootstrap], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    bad = subprocess.run([*cli, "topic", "list", "-b", bootstrap, "-X", "linger.msec=1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "linger.msec" in bad.stderr


def test_a_duplicate_tansu_answers_without_an_offset_is_found_in_its_log(broker, bootstrap, topic_name):
    """tansu answers a re-sent idempotent batch DUPLICATE_SEQUENCE_NUMBER with base offset -1;
    `find_batch_offset` finds where it was written, by producer id, epoch and first sequence."""
    from raykafka.wire.errors import BY_NAME
    from raykafka.wire.fetch import find_batch_offset
    from raykafka.wire.record_encoding import encode_record_batch

    topic = topic_name("dup")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 1})
    config = parse_config({"bootstrap.servers": bootstrap})

    async def scenario():
        conn = await BrokerConnection(broker.host, broker.port).connect()
        try:
            init = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                  "transaction_timeout_ms": 60000})
            ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}

            async def send(seq: int, n: int):
                batch = encode_record_batch([b"%d" % (seq + i) for i in range(n)], base_sequence=seq, **ids)
                answer = await conn.request(messages.PRODUCE, {
                    "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
                return answer.responses[0].partition_responses[0]

            written = {seq: (await send(seq, 3)).base_offset for seq in (0, 3, 6)}
            assert written == {0: 0, 3: 3, 6: 6}
            again = await send(3, 3)
            assert again.error_code in (0, BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code)
            for seq, offset in written.items():
                assert await find_batch_offset(conn, config, topic, 0, 0, base_sequence=seq, max_bytes=1 << 20,
                                               **ids) == offset
            assert await find_batch_offset(conn, config, topic, 0, 3, base_sequence=9, max_bytes=1 << 20,
                                           **ids) is None
            return again
        finally:
            await conn.close()

    again = run(scenario())
    print(f"tansu answered the duplicate: error {again.error_code}, base offset {again.base_offset}")


def test_tansu_refuses_an_idempotent_producers_epoch_bump_so_its_old_epoch_still_writes(broker, topic_name):
    """KIP-360's InitProducerId with the producer's own id and epoch would fence that epoch's late
    requests. tansu answers it UNKNOWN_SERVER_ERROR and goes on writing the old epoch's batches,
    so a heal cannot fence a dead Flusher's last requests: `producer_log_match.scan_written` reads the
    log again until it is quiet instead. Should this test fail, tansu fences, and the heal can
    bump the epoch, then read the log once."""
    from raykafka.wire.errors import BY_NAME
    from raykafka.wire.record_encoding import encode_record_batch

    topic = topic_name("bump")
    with Admin(broker.bootstrap) as admin:
        admin.create_topics({topic: 1})

    async def scenario():
        conn = await BrokerConnection(broker.host, broker.port).connect()
        try:
            assert conn.version_for(messages.INIT_PRODUCER_ID) >= 3  # the version that carries id and epoch
            first = await conn.request(messages.INIT_PRODUCER_ID, {"transactional_id": None,
                                                                   "transaction_timeout_ms": 60000})

            async def write(seq: int) -> int:
                batch = encode_record_batch([b"%d" % seq], base_sequence=seq, producer_id=first.producer_id,
                                            producer_epoch=first.producer_epoch)
                answer = await conn.request(messages.PRODUCE, {
                    "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
                return answer.responses[0].partition_responses[0].error_code

            assert await write(0) == 0
            bump = await conn.request(messages.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": 60000,
                "producer_id": first.producer_id, "producer_epoch": first.producer_epoch})
            return bump.error_code, await write(1)
        finally:
            await conn.close()

    bumped, late = run(scenario())
    assert bumped == BY_NAME["UNKNOWN_SERVER_ERROR"].code
    assert late == 0
