"""SASL/OAUTHBEARER with `oauth_cb`: the client's message, the token's refresh, the config's
checks, and logins again before the session ends (KIP-368) with nothing lost.

Against `SaslFront` (conftest), which checks each token with `raykafka.mock.oauth`'s issuer
key and, with `session_lifetime_ms` set, closes a connection that sends a request after its
session ended. The clients' `oauth_cb` is `mint_token`, a module-level function: the actors
unpickle it and mint their own tokens with the key given in `sasl.oauthbearer.config`.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time

import pytest

from raykafka.driver.admin import Admin
from raykafka.mock.oauth import mint_token
from raykafka.wire import messages
from raykafka.wire.config import parse_config
from raykafka.wire.connection import REAUTHENTICATE_FRACTION, BrokerConnection, security_from_config
from raykafka.wire.errors import AuthenticationError, ConfigError
from raykafka.wire.sasl import TOKEN_REFRESH_FRACTION, OAuthBearer

TOKEN_LIFETIME_S = 3.0
SESSION_LIFETIME_MS = 1500
STREAM_S = 6.0  # long enough for several sessions to end on every connection
WAVES = 12
PER_WAVE = 50


def oauth_config(broker, key: str | None = None, lifetime_s: float = TOKEN_LIFETIME_S, **more) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": mint_token,
            "sasl.oauthbearer.config": f"key={key or broker.front.oauth_key} lifetime.s={lifetime_s}", **more}


@pytest.fixture()
def short_sessions(sasl_front):
    """The front gives each login a session of SESSION_LIFETIME_MS and enforces it, for one test."""
    sasl_front.front.session_lifetime_ms = SESSION_LIFETIME_MS
    yield sasl_front
    sasl_front.front.session_lifetime_ms = 0


# -- the client alone --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_client_first_message_is_rfc_7628():
    bearer = OAuthBearer(lambda config: ("abc.DEF-123~+/=", time.time() + 60))
    exchange = bearer.exchange()
    assert next(exchange) == b"n,,\x01auth=Bearer abc.DEF-123~+/=\x01\x01"
    with pytest.raises(StopIteration):  # an empty answer: logged in
        exchange.send(b"")


def test_an_error_challenge_is_acknowledged_then_refused():
    exchange = OAuthBearer(lambda config: ("tok", time.time() + 60)).exchange()
    next(exchange)
    assert exchange.send(b'{"status":"invalid_token"}') == b"\x01"
    with pytest.raises(AuthenticationError, match="refused the token"):
        exchange.send(b"")


def test_the_token_is_fetched_again_once_most_of_its_life_has_passed():
    clock = Clock()
    calls: list[str | None] = []

    def cb(config):
        calls.append(config)
        return f"token{len(calls)}", clock.now + 100

    bearer = OAuthBearer(cb, "scope=kafka", clock=clock)
    assert bearer.token() == "token1"
    clock.now += 100 * TOKEN_REFRESH_FRACTION - 1
    assert bearer.token() == "token1"  # reused
    clock.now += 1
    assert bearer.token() == "token2"
    assert calls == ["scope=kafka", "scope=kafka"] and bearer.calls == 2
    assert "token2" not in repr(bearer)


@pytest.mark.parametrize(("answer", "why"), [
    (("has space", 10**10), "not an RFC 6750 bearer token"),
    (("tok", 1.0), "expired"),
    (("tok", "soon"), "expiry of type str"),
    ("just-a-token", "must return \\(token, expiry"),
])
def test_a_bad_answer_of_the_callback_is_named_without_the_token(answer, why):
    with pytest.raises(AuthenticationError, match=why) as raised:
        OAuthBearer(lambda config: answer).token()
    assert "has space" not in str(raised.value)


def test_config_takes_oauthbearer_with_a_picklable_callback_and_hides_its_config():
    config = parse_config({"bootstrap.servers": "h:1", "security.protocol": "sasl_ssl",
                           "sasl.mechanism": "oauthbearer", "oauth_cb": mint_token,
                           "sasl.oauthbearer.config": "key=very-secret lifetime.s=3"})
    assert config["sasl.mechanism"] == "OAUTHBEARER"
    assert "very-secret" not in repr(config)
    assert pickle.loads(pickle.dumps(config))["oauth_cb"] is mint_token
    _context, sasl = security_from_config(config)
    assert isinstance(sasl, OAuthBearer) and sasl.oauthbearer_config == "key=very-secret lifetime.s=3"


@pytest.mark.parametrize(("more", "error"), [
    ({"oauth_cb": lambda config: ("t", 0)}, r"oauth_cb: cannot be pickled .* module-level function"),
    ({}, r"oauth_cb: sasl.mechanism=OAUTHBEARER needs oauth_cb"),
    ({"oauth_cb": "not callable"}, r"oauth_cb: expected a callable"),
    ({"oauth_cb": mint_token, "sasl.username": "u"}, r"sasl.username: sasl.mechanism=OAUTHBEARER takes its token"),
])
def test_config_refuses_what_cannot_work(more, error):
    with pytest.raises(ConfigError, match=error):
        parse_config({"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext",
                      "sasl.mechanism": "OAUTHBEARER", **more})


def test_oauth_cb_without_oauthbearer_is_refused():
    with pytest.raises(ConfigError, match="oauth_cb: is used by sasl.mechanism=OAUTHBEARER only"):
        parse_config({"bootstrap.servers": "h:1", "oauth_cb": mint_token})


# -- against the front ---------------------------------------------------------------------------


@pytest.mark.broker
def test_login_with_a_token(sasl_front, topic_name):
    topic = topic_name("oauth")
    before = sasl_front.front.log.logins.get("OAUTHBEARER", 0)
    with Admin(oauth_config(sasl_front)) as admin:
        admin.create_topics({topic: 2})
        assert admin.list_topics()[topic] == 2
    assert sasl_front.front.log.logins.get("OAUTHBEARER", 0) > before


@pytest.mark.broker
def test_a_wrong_token_is_refused_with_a_named_error(sasl_front):
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=r"SASL OAUTHBEARER with the token of oauth_cb with "
                                                  r"127\.0\.0\.1:\d+ failed: Authentication failed") as raised:
        with Admin(oauth_config(sasl_front, key="not-the-issuer-key")) as admin:
            admin.list_topics()
    assert time.monotonic() - started < 5
    assert "not-the-issuer-key" not in str(raised.value)
    assert sasl_front.front.log.refusals[-1] == "OAUTHBEARER: invalid_token"


@pytest.mark.slow  # 6 s; the default tier keeps a token refreshed mid-stream
@pytest.mark.broker
def test_a_connection_logs_in_again_before_its_session_ends(short_sessions):
    front = short_sessions.front
    config = parse_config(oauth_config(short_sessions))
    _context, sasl = security_from_config(config)
    host, port = short_sessions.bootstrap.split(":")

    async def run() -> tuple[int, int]:
        conn = await BrokerConnection(host, int(port), sasl=sasl).connect()
        answered = 0
        deadline = time.monotonic() + STREAM_S
        try:
            while time.monotonic() < deadline:
                # several in flight at once: the login again waits for them, and holds the next ones
                futures = [conn.send_nowait(messages.METADATA, {"topics": None, "allow_auto_topic_creation": False})
                           for _ in range(5)]
                for future in futures:
                    await conn.wait(future, messages.METADATA)
                    answered += 1
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
        return answered, conn.reauthentications

    expired = front.log.expired
    answered, reauthentications = asyncio.run(run())
    assert answered > 0
    least = int(STREAM_S / (SESSION_LIFETIME_MS / 1000 * REAUTHENTICATE_FRACTION)) - 1
    assert reauthentications >= least, (reauthentications, least)
    assert front.log.expired == expired  # never a request after the session ended
    assert sasl.calls >= 2  # the token was fetched again as it aged


@pytest.mark.broker
def test_a_token_refused_at_a_login_again_fails_the_requests_held_by_name(short_sessions):
    front = short_sessions.front
    tokens = iter([mint_token(f"key={front.oauth_key} lifetime.s=1.5"), mint_token("key=revoked lifetime.s=60")])
    sasl = OAuthBearer(lambda config: next(tokens))
    host, port = short_sessions.bootstrap.split(":")
    metadata = {"topics": None, "allow_auto_topic_creation": False}

    async def run() -> None:
        conn = await BrokerConnection(host, int(port), sasl=sasl).connect()
        try:
            await conn.request(messages.METADATA, metadata)
            await asyncio.sleep(SESSION_LIFETIME_MS / 1000)  # past the point of logging in again
            held = [conn.send_nowait(messages.METADATA, metadata) for _ in range(3)]
            for future in held:
                with pytest.raises(AuthenticationError, match="SASL OAUTHBEARER with the token of oauth_cb"):
                    await conn.wait(future, messages.METADATA)
            assert not conn.connected
        finally:
            await conn.close()

    asyncio.run(run())
    assert sasl.calls == 2 and front.log.refusals[-1] == "OAUTHBEARER: invalid_token"


@pytest.mark.broker
@pytest.mark.ray
def test_a_token_refreshed_mid_stream_loses_nothing(short_sessions, ray_session, topic_name):
    """A producer (in a thread) and a consumer at once, both through their actors, across
    several sessions and tokens: every record is delivered and read once, and both clients'
    connections logged in again."""
    from raykafka.driver.consumer import Consumer
    from raykafka.driver.producer import Producer

    front = short_sessions.front
    topic = topic_name("oauth-stream")
    config = oauth_config(short_sessions)
    tokens, expired = len(front.log.tokens), front.log.expired
    by_before = dict(front.log.reauthentications_by)
    with Admin(config) as admin:
        admin.create_topics({topic: 2})
    values = [f"v{wave}-{i}".encode() for wave in range(WAVES) for i in range(PER_WAVE)]
    metadata: list = []
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with Producer({**config, "client.id": "oauth-producer"}) as producer:
                for wave in range(WAVES):  # each wave delivered before the next: traffic across STREAM_S
                    futures = [producer.send(topic, v, partition=i % 2)
                               for i, v in enumerate(values[wave * PER_WAVE:(wave + 1) * PER_WAVE])]
                    metadata.extend(f.result(60) for f in futures)
                    time.sleep(STREAM_S / WAVES)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    consumer = Consumer({**config, "client.id": "oauth-consumer"})
    producing = threading.Thread(target=produce, name="oauth-producer")
    got: list[bytes] = []
    try:
        for partition in (0, 1):
            consumer.assign(topic, partition, "earliest")
        producing.start()
        for batch in consumer.batches(timeout=30):
            got += batch.column("value").to_pylist()
            if len(got) >= len(values):
                break
    finally:
        producing.join(120)
        consumer.close()
    assert not failures, failures
    offsets = sorted((m.partition, m.offset) for m in metadata)
    assert offsets == sorted((p, o) for p in (0, 1) for o in range(len(values) // 2))
    assert sorted(got) == sorted(values)  # every record, once
    by = {client: n - by_before.get(client, 0) for client, n in front.log.reauthentications_by.items()}
    assert by.get("oauth-producer", 0) >= 2 and by.get("oauth-consumer", 0) >= 2, by
    assert len(front.log.tokens) - tokens >= 2  # oauth_cb was called more than once
    assert front.log.expired == expired
