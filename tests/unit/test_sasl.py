"""The client side of SASL PLAIN and SCRAM (wire/sasl.py), without a broker.

The SCRAM exchange is checked against RFC 7677's test vector, then fed hostile server
messages: each must end the exchange with an `AuthenticationError` naming its cause, before
any PBKDF2 work the broker could make unbounded.
"""

from __future__ import annotations

import base64
import time

import pytest

from raykafka.wire.errors import AuthenticationError, ConfigError
from raykafka.wire.sasl import SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS, SaslCredentials

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="
RFC7677_SERVER_FIRST = f"r={RFC7677_SERVER_NONCE},s={RFC7677_SALT},i=4096".encode()
RFC7677_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc7677_exchange():
    return SaslCredentials("SCRAM-SHA-256", "user", "pencil").exchange(nonce=RFC7677_CLIENT_NONCE)


def server_first(*, nonce: str = RFC7677_SERVER_NONCE, salt: str = RFC7677_SALT, iterations: object = 4096) -> bytes:
    return f"r={nonce},s={salt},i={iterations}".encode()


def test_scram_sha256_matches_rfc7677_vector():
    exchange = rfc7677_exchange()
    assert next(exchange) == RFC7677_CLIENT_FIRST
    assert exchange.send(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    with pytest.raises(StopIteration):  # the server's signature verifies: the exchange ends cleanly
        exchange.send(RFC7677_SERVER_FINAL)


def test_scram_takes_extensions_after_the_attributes_it_needs():
    exchange = rfc7677_exchange()
    next(exchange)
    assert exchange.send(RFC7677_SERVER_FIRST + b",x=ignored").startswith(b"c=biws,r=" + RFC7677_SERVER_NONCE.encode())


def fail_at_server_first(message: bytes, match: str) -> AuthenticationError:
    exchange = rfc7677_exchange()
    next(exchange)
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=match) as raised:
        exchange.send(message)
    assert time.monotonic() - started < 1  # refused before any PBKDF2 a hostile count could make long
    return raised.value


@pytest.mark.parametrize("iterations", [1, 1000, SCRAM_MIN_ITERATIONS - 1])
def test_scram_refuses_too_few_iterations(iterations):
    fail_at_server_first(server_first(iterations=iterations),
                         rf"asks for {iterations} iterations, fewer than the minimum 4096 for SCRAM-SHA-256")


@pytest.mark.parametrize("iterations", [SCRAM_MAX_ITERATIONS + 1, 10**9, 2**31 - 1, 9_999_999_999])
def test_scram_refuses_absurd_iterations_at_once(iterations):
    fail_at_server_first(server_first(iterations=iterations),
                         rf"asks for {iterations} iterations, more than the maximum 16384")


def test_scram_takes_the_bounds_themselves():
    for iterations in (SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS):
        exchange = rfc7677_exchange()
        next(exchange)
        assert exchange.send(server_first(iterations=iterations)).startswith(b"c=biws,r=" + RFC7677_SERVER_NONCE.encode())


@pytest.mark.parametrize("iterations", ["", "-4096", "+4096", "4096.0", "0x1000", "４０９６", "1" * 11])
def test_scram_refuses_an_iteration_count_that_is_not_a_number(iterations):
    fail_at_server_first(server_first(iterations=iterations), "iteration count .* is not a number")


@pytest.mark.parametrize("nonce", ["someoneelse", RFC7677_CLIENT_NONCE, RFC7677_CLIENT_NONCE[:-1] + "X-server",
                                   "prefix" + RFC7677_CLIENT_NONCE + "server"])
def test_scram_refuses_a_server_nonce_that_does_not_extend_ours(nonce):
    fail_at_server_first(server_first(nonce=nonce), "server nonce does not extend the client nonce")


def test_scram_refuses_a_server_nonce_that_is_not_printable():
    fail_at_server_first(server_first(nonce=RFC7677_CLIENT_NONCE + "serv er"), "nonce is not printable ASCII")


@pytest.mark.parametrize("salt", ["!!notbase64!!", "W22ZaJ0SNY7soEsUEjb6gQ", "W22ZaJ0SNY7soEsUEjb6gQ=",
                                  "W22Z aJ0SNY7soEsUEjb6gQ==", "W22ZaJ0S=NY7soEsUEjb6gQ=", "W22ZaJ0SNY7soEsUEjb6gQ==="])
def test_scram_refuses_a_salt_that_is_not_base64(salt):
    fail_at_server_first(server_first(salt=salt), "the salt of the server-first-message is not valid base64")


def test_scram_refuses_an_empty_salt():
    fail_at_server_first(server_first(salt=""), "salt of the server-first-message is empty")


@pytest.mark.parametrize(("message", "match"), [
    (b"", "malformed server-first-message: b'' is not an attribute"),
    (b"\xff\xfe garbage", "malformed server-first-message: not UTF-8"),
    (b"garbage", "malformed server-first-message: b'garbage' is not an attribute"),
    (f"r={RFC7677_SERVER_NONCE},i=4096".encode(), "expected r=, s=, i= in that order"),
    (f"r={RFC7677_SERVER_NONCE},s={RFC7677_SALT}".encode(), "expected r=, s=, i= in that order"),
    (f"s={RFC7677_SALT},r={RFC7677_SERVER_NONCE},i=4096".encode(), "expected r=, s=, i= in that order"),
    (f"r={RFC7677_SERVER_NONCE},,s={RFC7677_SALT},i=4096".encode(), "b'' is not an attribute"),
    (f"m=must-know,r={RFC7677_SERVER_NONCE},s={RFC7677_SALT},i=4096".encode(), r"mandatory extension \(m=\)"),
    (b"e=unknown-user", "the broker says b'unknown-user'"),
])
def test_scram_refuses_a_malformed_server_first_message(message, match):
    fail_at_server_first(message, match)


def finish(final: bytes):
    exchange = rfc7677_exchange()
    next(exchange)
    exchange.send(RFC7677_SERVER_FIRST)
    return exchange.send(final)


@pytest.mark.parametrize("final", [b"v=" + base64.b64encode(b"\0" * 32), b"v=" + base64.b64encode(b"short"),
                                   b"v=7" + RFC7677_SERVER_FINAL[3:], b"v="])
def test_scram_refuses_a_server_signature_that_does_not_verify(final):
    with pytest.raises(AuthenticationError, match="server signature does not verify"):
        finish(final)


@pytest.mark.parametrize(("final", "match"), [
    (b"", "malformed server-final-message: b'' is not an attribute"),
    (b"\x00\x01\x02", "malformed server-final-message: b'\\\\x00\\\\x01\\\\x02' is not an attribute"),
    (b"\xc3\x28", "malformed server-final-message: not UTF-8"),
    (b"x=1", "malformed server-final-message: expected v=, got b'x=1'"),
    (b"v=not base64!", "server signature of the server-final-message is not valid base64"),
    (b"e=invalid-proof", "the broker says b'invalid-proof'"),
    (b"m=x,v=abcd", r"mandatory extension \(m=\)"),
])
def test_scram_refuses_a_malformed_server_final_message(final, match):
    with pytest.raises(AuthenticationError, match=match):
        finish(final)


def test_plain_token_and_bad_settings():
    assert next(SaslCredentials("plain", "alice", "s3cret").exchange()) == b"\0alice\0s3cret"
    assert "s3cret" not in repr(SaslCredentials("PLAIN", "alice", "s3cret"))
    with pytest.raises(ConfigError, match="sasl.mechanism"):
        SaslCredentials("GSSAPI", "a", "b")
    with pytest.raises(ConfigError, match="sasl.password: must not contain a NUL") as raised:
        SaslCredentials("PLAIN", "alice", "pa\0ss")
    assert "pa\0ss" not in str(raised.value)
