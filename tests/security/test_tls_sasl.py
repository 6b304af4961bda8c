"""TLS and SASL against real tansu: TLS through a TLS front, SASL refusals by tansu itself.

What tansu 0.6.0 allows, and so what is proved here:
- TLS: tansu cannot serve it (see conftest), so a TLS front terminates it before a real
  tansu; our client and confluent-kafka both talk to it with the same settings.
- SASL with `--authentication`: tansu offers SCRAM-SHA-256 and SCRAM-SHA-512 only (PLAIN:
  it closes the connection). It has no way to hold a SCRAM user on an authenticating
  in-memory broker (`tansu user create` is refused before authentication, and memory storage
  does not survive a restart), so a successful login cannot be shown on it: the tests here
  prove the refusals are clear and quick; test_sasl_login.py shows logins through a SASL front.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from raykafka.driver.admin import Admin
from raykafka.driver.embedded_broker import EmbeddedBroker, tansu_binary
from raykafka.wire import messages
from raykafka.wire.cluster import Cluster
from raykafka.wire.config import parse_config
from raykafka.wire.connection import BrokerConnection, security_from_config
from raykafka.wire.errors import AuthenticationError, BrokerConnectionError, ConfigError
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

from .conftest import TlsFront

# -- settings, no broker (the SCRAM exchange itself: tests/unit/test_sasl.py) ------------------


def test_bad_security_settings():
    with pytest.raises(ConfigError, match="sasl.password"):
        security_from_config({"security.protocol": "sasl_plaintext", "sasl.username": "a"})
    with pytest.raises(ConfigError, match="ssl.ca.location"):
        security_from_config({"security.protocol": "ssl", "ssl.ca.location": "/nonexistent/ca.pem"})


def test_a_wrong_key_password_is_a_config_error_that_does_not_show_it(certs):
    config = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca),
              "ssl.certificate.location": str(certs.cert), "ssl.key.location": str(certs.encrypted_key)}
    context, _ = security_from_config({**config, "ssl.key.password": certs.key_password})
    assert context is not None  # the right password opens the key
    wrong = "wrong-" + certs.key_password
    with pytest.raises(ConfigError, match="ssl.certificate.location: cannot load") as raised:
        security_from_config({**config, "ssl.key.password": wrong})
    assert wrong not in str(raised.value) and certs.key_password not in str(raised.value)


# -- TLS, through the TLS front to a real tansu ----------------------------------------------


def tls_config(tls_broker, ca=None) -> dict:
    return {"bootstrap.servers": tls_broker.bootstrap, "security.protocol": "ssl",
            "ssl.ca.location": str(ca or tls_broker.certs.ca)}


@pytest.mark.broker
def test_admin_creates_and_lists_topics_over_tls(tls_broker, topic_name):
    topic = topic_name("tls")
    handshakes = tls_broker.front.connections
    with Admin(tls_config(tls_broker)) as admin:
        admin.create_topics({topic: 3})
        assert admin.list_topics()[topic] == 3
    assert tls_broker.front.connections > handshakes  # it went through TLS, not around it


@pytest.mark.broker
def test_produce_and_fetch_round_trip_over_tls(tls_broker, topic_name):
    topic = topic_name("tls-rt")
    with Admin(tls_config(tls_broker)) as admin:
        admin.create_topics({topic: 1})
    values = [f"secret-{i}".encode() for i in range(100)]

    async def round_trip():
        cluster = Cluster(parse_config(tls_config(tls_broker)))
        try:
            conn = await cluster.leader_connection(topic, 0)
            assert conn.ssl_context is not None and conn.port == tls_broker.front.port
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                    "topic_data": [{"name": topic, "partition_data": [
                        {"index": 0, "records": encode_record_batch(values, keys=[b"k"] * len(values))}]}]}
            produced = (await conn.request(messages.PRODUCE, body)).responses[0].partition_responses[0]
            assert produced.error_code == 0
            version = min(conn.version_for(messages.FETCH), 12)
            fetch = {"max_wait_ms": 200, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                     "topics": [{"topic": topic, "partitions": [
                         {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
            data = (await conn.request(messages.FETCH, fetch, version)).responses[0].partitions[0]
            assert data.error_code == 0
            return produced.base_offset, [r for b in decode_record_batches(data.records or b"") for r in b.records]
        finally:
            await cluster.close()

    base_offset, records = asyncio.run(round_trip())
    assert base_offset == 0
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(100))


@pytest.mark.broker
def test_confluent_kafka_talks_to_the_same_tls_broker(tls_broker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    topic = topic_name("tls-ck")
    with Admin(tls_config(tls_broker)) as admin:
        admin.create_topics({topic: 2})
    client = AdminClient(tls_config(tls_broker))
    metadata = client.list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 2
    assert {b.port for b in metadata.brokers.values()} == {tls_broker.front.port}
    producer = confluent_kafka.Producer(tls_config(tls_broker))
    producer.produce(topic, b"from librdkafka over TLS", partition=0)
    assert producer.flush(10) == 0


@pytest.mark.broker
def test_a_ca_that_did_not_sign_the_broker_is_a_clear_tls_error(tls_broker):
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*certificate verify"):
        with Admin(tls_config(tls_broker, ca=tls_broker.certs.other_ca)) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 5


@pytest.fixture(scope="module")
def other_host_front(tls_broker):
    """A TLS front to the same tansu whose certificate (signed by the same CA) names kafka.example.com only."""
    front = TlsFront(tls_broker.broker.port, tls_broker.certs.other_host_cert, tls_broker.certs.other_host_key).start()
    yield front
    front.stop()


@pytest.mark.broker
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_certificate_for_another_host_name_is_refused(tls_broker, other_host_front, host):
    config = {**tls_config(tls_broker), "bootstrap.servers": f"{host}:{other_host_front.port}"}
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=rf"TLS handshake with {host}:\d+ failed: .*(mismatch|match)") as raised:
        with Admin(config) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 5
    assert "certificate verify failed" in str(raised.value), raised.value


@pytest.mark.broker
def test_a_certificate_for_another_host_name_is_taken_with_identification_off(tls_broker, other_host_front,
                                                                              topic_name):
    topic = topic_name("tls-other-host")
    with Admin(tls_config(tls_broker)) as admin:
        admin.create_topics({topic: 1})
    config = {**tls_config(tls_broker), "bootstrap.servers": f"127.0.0.1:{other_host_front.port}",
              "ssl.endpoint.identification.algorithm": "none"}
    handshakes = other_host_front.connections
    with Admin(config) as admin:
        assert admin.list_topics()[topic] == 1
    assert other_host_front.connections > handshakes  # the handshake with the other host's certificate completed
    with pytest.raises(AuthenticationError, match="certificate verify failed"):  # the CA is still checked
        with Admin({**config, "ssl.ca.location": str(tls_broker.certs.other_ca)}) as admin:
            admin.list_topics()


@pytest.mark.broker
def test_tls_to_a_plaintext_listener_fails_naming_tls(tmp_path, certs):
    """A plaintext broker waits for the rest of a 'frame' the ClientHello started: no hang past the timeout."""
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as plain:
        config = {"bootstrap.servers": plain.bootstrap, "security.protocol": "ssl", "ssl.ca.location": str(certs.ca),
                  "socket.connection.setup.timeout.ms": 1000}
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="TLS handshake .* no answer in 1.0s"):
            with Admin(config) as admin:
                admin.list_topics()
        assert time.monotonic() - started < 5


# -- SASL, against tansu with --authentication ------------------------------------------------


def sasl_config(broker, mechanism, user="alice", password="wrong-password") -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_bad_credentials_is_a_quick_clear_error(sasl_broker, mechanism):
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        with Admin(sasl_config(sasl_broker, mechanism)) as admin:
            admin.create_topics({"never-created": 1})
    assert time.monotonic() - started < 5
    text = str(raised.value)
    assert f"SASL {mechanism} as 'alice'" in text and "unknown-user" in text, text


@pytest.mark.broker
def test_plain_not_offered_by_tansu_is_a_clear_error(sasl_broker):
    with pytest.raises(AuthenticationError, match="SASL PLAIN as 'alice' .* does not offer PLAIN"):
        with Admin(sasl_config(sasl_broker, "PLAIN")) as admin:
            admin.list_topics()


@pytest.mark.broker
def test_the_sasl_broker_really_requires_authentication(sasl_broker):
    """Without SASL, ApiVersions is answered but Metadata gets the connection closed."""

    async def unauthenticated_metadata():
        conn = await BrokerConnection(sasl_broker.host, sasl_broker.port).connect()
        try:
            await conn.request(messages.METADATA, {"topics": None, "allow_auto_topic_creation": False})
        finally:
            await conn.close()

    with pytest.raises(BrokerConnectionError, match="closed by the broker"):
        asyncio.run(unauthenticated_metadata())


@pytest.mark.broker
def test_confluent_kafka_is_refused_the_same_way(sasl_broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    client = AdminClient(sasl_config(sasl_broker, "SCRAM-SHA-256"))
    with pytest.raises(confluent_kafka.KafkaException):
        client.list_topics(timeout=3)


@pytest.mark.broker
def test_tansu_cannot_provision_a_scram_user_on_an_authenticating_broker(sasl_broker):
    """Why no successful login is shown: `tansu user create` needs an unauthenticated connection."""
    result = subprocess.run([tansu_binary(), "user", "create", "--broker", f"tcp://{sasl_broker.bootstrap}",
                             "--mechanism", "scram256", "alice", "pw"], capture_output=True, timeout=30)
    assert result.returncode != 0
