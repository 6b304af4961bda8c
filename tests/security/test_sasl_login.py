"""SASL logins that succeed, refusals of a hostile broker, and passwords kept out of logs and errors.

Against `SaslFront` (conftest): it runs Kafka's SaslHandshake/SaslAuthenticate exchange
itself for one user, then pipes the connection to a real tansu, which advertises the front's
port, so every connection of a client (bootstrap, leaders, Ray actors') logs in through it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from pathlib import Path

import pytest

from raykafka.driver.admin import Admin
from raykafka.wire.connection import BrokerConnection, security_from_config
from raykafka.wire.errors import AuthenticationError
from raykafka.wire.sasl import SaslCredentials

from .conftest import ScramServer

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def login_config(broker, mechanism: str, password: str | None = None, protocol: str = "sasl_plaintext",
                 **more) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": broker.user, "sasl.password": broker.password if password is None else password,
            **more}


# -- the client against the tests' own SCRAM server, no broker ------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_with_an_independent_server(mechanism):
    server = ScramServer(mechanism, {"bob,=": "päss"}, iterations=4096)
    exchange = SaslCredentials(mechanism, "bob,=", "päss").exchange()
    client_first = next(exchange)
    assert client_first.startswith(b"n,,n=bob=2C=3D,r=")
    client_final = exchange.send(server.first(client_first))
    with pytest.raises(StopIteration):  # the server's signature verified
        exchange.send(server.final(client_final))


# -- logins that succeed, then real data through them ------------------------------------------


@pytest.mark.broker
@pytest.mark.ray
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_login_then_produce_and_consume(sasl_front, ray_session, topic_name, mechanism):
    from raykafka.driver.consumer import Consumer
    from raykafka.driver.producer import Producer

    topic = topic_name("sasl-" + mechanism.lower())
    config = login_config(sasl_front, mechanism)
    before = sasl_front.front.log.logins.get(mechanism, 0)
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    values = [f"{mechanism}-{i}".encode() for i in range(200)]
    with Producer(config) as producer:
        futures = [producer.send(topic, v, partition=i % 2) for i, v in enumerate(values)]
        metadata = [f.result(60) for f in futures]
    assert sorted((m.partition, m.offset) for m in metadata) == sorted((p, o) for p in (0, 1) for o in range(100))
    consumer = Consumer(config)
    try:
        for partition in (0, 1):
            consumer.assign(topic, partition, "earliest")
        got = [v for batch in consumer.batches(timeout=30, until_end=True)
               for v in batch.column("value").to_pylist()]
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    # admin, producer actors and consumer actors each logged in through the front
    assert sasl_front.front.log.logins.get(mechanism, 0) - before >= 3


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_login_over_tls(sasl_tls_front, certs, topic_name, mechanism):
    topic = topic_name("sasl-ssl")
    config = login_config(sasl_tls_front, mechanism, protocol="sasl_ssl", **{"ssl.ca.location": str(certs.ca)})
    with Admin(config) as admin:
        admin.create_topics({topic: 3})
        assert admin.list_topics()[topic] == 3
    assert sasl_tls_front.front.log.logins.get(mechanism, 0) >= 1


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_a_quick_clear_error(sasl_front, mechanism):
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=rf"SASL {mechanism} as 'alice' with 127\.0\.0\.1:\d+ failed: "
                                                  r"Authentication failed .* invalid credentials"):
        with Admin(login_config(sasl_front, mechanism, password="not-" + sasl_front.password)) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 5


# -- a hostile broker: each bad message is refused, naming why, in bounded time ----------------------


def _replace(attribute: str, value: str):
    """A server-first tamper: the honest message with one attribute's value replaced."""
    def tamper(scram: ScramServer, honest: bytes) -> bytes:
        parts = [p if not p.startswith(attribute + "=") else f"{attribute}={value}" for p in honest.decode().split(",")]
        return ",".join(parts).encode()
    return tamper


HOSTILE_FIRST = {
    "too few iterations": (_replace("i", "1000"), "asks for 1000 iterations, fewer than the minimum 4096"),
    "absurd iterations": (_replace("i", str(2**31 - 1)), "asks for 2147483647 iterations, more than the maximum 16384"),
    "nonce not extending ours": (_replace("r", "forged-nonce"), "server nonce does not extend the client nonce"),
    "nonce only ours": (lambda s, honest: honest.replace(s.nonce.encode(), s.client_nonce.encode()),
                        "server nonce does not extend the client nonce"),
    "salt not base64": (_replace("s", "!!not*base64!!"), "salt of the server-first-message is not valid base64"),
    "iterations missing": (lambda s, honest: honest.rsplit(b",", 1)[0], "expected r=, s=, i= in that order"),
    "iterations not a number": (_replace("i", "4096x"), "iteration count '4096x' is not a number"),
    "garbage": (lambda s, honest: b"\x00\xff\x13garbage", "malformed server-first-message: not UTF-8"),
    "empty": (lambda s, honest: b"", "malformed server-first-message"),
}

HOSTILE_FINAL = {
    "wrong server signature": (lambda s, honest: b"v=" + base64.b64encode(bytes(len(s.server_key))),
                               "server signature does not verify"),
    "signature not base64": (lambda s, honest: b"v=***", "server signature of the server-final-message is not valid base64"),
    "no signature": (lambda s, honest: b"x=" + honest[2:], "malformed server-final-message: expected v="),
    "garbage": (lambda s, honest: b"\xc3\x28", "malformed server-final-message: not UTF-8"),
}


def hostile_login(broker, mechanism: str, **more) -> AuthenticationError:
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        with Admin(login_config(broker, mechanism, **more)) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 5, f"took {time.monotonic() - started:.1f}s"
    text = str(raised.value)
    assert text.startswith(f"SASL {mechanism} as 'alice' with 127.0.0.1:{broker.front.port} failed: "), text
    return raised.value


HOSTILE = {**{("server_first", case): v for case, v in HOSTILE_FIRST.items()},
           **{("server_final", case): v for case, v in HOSTILE_FINAL.items()}}


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("message", "case"), list(HOSTILE))
def test_a_hostile_server_message_is_refused(sasl_front, hostility, mechanism, message, case):
    tamper, cause = HOSTILE[message, case]
    setattr(hostility, message, tamper)
    assert cause in str(hostile_login(sasl_front, mechanism))


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_broker_that_never_answers_the_login_is_refused_in_bounded_time(sasl_front, hostility, mechanism):
    hostility.silent = True
    error = hostile_login(sasl_front, mechanism, **{"socket.connection.setup.timeout.ms": 1000})
    assert "no answer to SaslAuthenticate in 1.0s" in str(error)


# -- passwords stay out of logs, errors and reprs during failed logins ------------------------------


def _texts(error: BaseException) -> str:
    """An error's text and every error chained to it."""
    parts = []
    while error is not None:
        parts.append(f"{type(error).__name__}: {error} {error!r}")
        error = error.__cause__ or error.__context__
    return "\n".join(parts)


@pytest.mark.broker
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_failed_logins_log_and_raise_no_password(sasl_front, hostility, caplog, mechanism):
    wrong = "wrong-pw-" + sasl_front.password[-6:]
    caplog.set_level(logging.DEBUG)
    texts = []
    with pytest.raises(AuthenticationError) as raised:  # refused by the broker
        with Admin(login_config(sasl_front, mechanism, password=wrong)) as admin:
            texts.append(repr(admin.config))
            admin.list_topics()
    texts.append(_texts(raised.value))
    if mechanism != "PLAIN":  # refused by the client: the broker's signature is wrong
        hostility.server_final = HOSTILE_FINAL["wrong server signature"][0]
        with pytest.raises(AuthenticationError) as raised:
            with Admin(login_config(sasl_front, mechanism)) as admin:
                admin.list_topics()
        texts.append(_texts(raised.value))

    async def direct() -> None:
        _, sasl = security_from_config(login_config(sasl_front, mechanism, password=wrong))
        hostility.server_final = None
        conn = BrokerConnection(sasl_front.broker.host, sasl_front.front.port, sasl=sasl)
        texts.append(repr(conn) + repr(sasl) + repr(conn.sasl))
        await conn.connect()

    with pytest.raises(AuthenticationError) as raised:
        asyncio.run(direct())
    texts.append(_texts(raised.value))
    texts += [f"{r.name} {r.levelname} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records]
    whole = "\n".join(texts)
    assert "SASL" in whole  # the errors were seen
    assert wrong not in whole and sasl_front.password not in whole


@pytest.mark.broker
@pytest.mark.ray
def test_a_producer_that_cannot_log_in_says_so_without_the_password(sasl_front, ray_session):
    """The actors log in their own processes: their error, and Ray's log files, hold no password."""
    import ray

    from raykafka.driver.producer import Producer

    wrong = "wrong-pw-" + sasl_front.password[-6:]
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as raised:
        Producer(login_config(sasl_front, "SCRAM-SHA-256", password=wrong))
    assert time.monotonic() - started < 60
    text = _texts(raised.value)
    assert "SASL SCRAM-SHA-256 as 'alice'" in text and "invalid credentials" in text
    assert wrong not in text and sasl_front.password not in text
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    leaked = [p.name for p in logs.rglob("*") if p.is_file() and wrong.encode() in p.read_bytes()]
    assert not leaked
