"""SASL: the client side of PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and
OAUTHBEARER (RFC 7628, KIP-255).

One `SaslCredentials` (PLAIN, SCRAM) or `OAuthBearer` per client, built from the config by
`security_from_config` and shared by every `BrokerConnection` of that client (in each process:
the actors build their own from the config Ray ships them). `BrokerConnection.connect` calls
`authenticate` once ApiVersions is done: SaslHandshake v1 names the mechanism, then one
SaslAuthenticate request per token of the mechanism's exchange, each waiting for the broker's
answer before the next. The whole login is part of connection setup, so each step waits at
most `socket.connection.setup.timeout.ms`, as the Java client bounds its handshakes.
`authenticate` returns the session lifetime the broker gave (SaslAuthenticate v1+,
KIP-368): the connection logs in again, the same way, before it ends.

OAUTHBEARER takes its token from the user's `oauth_cb` (confluent-kafka's form: called with
`sasl.oauthbearer.config`, it returns the token and its expiry in seconds since the epoch).
`OAuthBearer` calls it at the first login and again once TOKEN_REFRESH_FRACTION of the token's
life has passed, as librdkafka refreshes; logins in between reuse the token. `authenticate`
runs the call in a worker thread, as it may wait on a provider's token endpoint, and the
event loop carries every connection of the process. The token is a secret: it is in no repr,
log or error.

The SCRAM client makes the checks of the Java client (`ScramSaslClient`), and a few more:
- the server's nonce starts with ours and adds to it (RFC 5802 section 5.1);
- the salt and the server signature are strict base64, and the salt is not empty;
- the iteration count is at least 4096 (Java's and RFC 7677's minimum) and at most 16384:
  Kafka's own `ScramMechanism` refuses to store a credential with more, so no Kafka broker
  asks for more, and a broker that asks for 2**31 cannot make the client spend hours in
  PBKDF2 (16384 rounds of SHA-512 take about 10 ms here);
- the server signature must verify, so a broker that does not know the password is refused;
- any other shape of message (not UTF-8, attributes missing or out of order, a mandatory
  extension `m=`) fails.
Every failure is an `AuthenticationError` naming its cause; the password and the token
appear in none of them, nor in a repr. No Ray and no sockets here: the connection does the I/O.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, Protocol

from . import messages
from .errors import (
    AuthenticationError,
    BrokerConnectionError,
    BrokerError,
    ConfigError,
    RequestTimedOutError,
    UnsupportedVersionError,
)


class _LoginConnection(Protocol):
    """What a login needs of a connection (a `BrokerConnection`, which calls `authenticate`)."""

    host: str
    port: int
    connect_timeout: float

    def version_for(self, api: Any, wanted: int | None = None) -> int: ...

    async def request(self, api: Any, body: Any, version: int | None = None, timeout: float | None = None) -> Any: ...

SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384

Digest = Callable[..., Any]  # a hashlib constructor
SCRAM_DIGESTS: dict[str, Digest] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = ("PLAIN", *SCRAM_DIGESTS, OAUTHBEARER)
# a token is fetched again once this share of its life (from fetch to expiry) has passed (librdkafka: 0.8)
TOKEN_REFRESH_FRACTION = 0.8
_KVSEP = b"\x01"  # RFC 7628's separator of key=value pairs, and the client's answer to an error challenge
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token: what a Bearer token may hold

_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # RFC 5802 `printable`: visible ASCII but ','


class SaslCredentials:
    """The mechanism, user and password of one client, and the client side of its exchange."""

    def __init__(self, mechanism: str, username: str, password: str):
        self.mechanism = mechanism.upper()
        if self.mechanism not in MECHANISMS:
            raise ConfigError(f"sasl.mechanism: {mechanism} is not supported (use one of {', '.join(MECHANISMS)})")
        if self.mechanism == OAUTHBEARER:
            raise ConfigError("sasl.mechanism: OAUTHBEARER takes its token from oauth_cb, not a user and password")
        for key, value in (("sasl.username", username), ("sasl.password", password)):
            if "\0" in value:  # PLAIN separates its fields with NUL
                raise ConfigError(f"{key}: must not contain a NUL character")
        self.username = username
        self.password = password

    def __repr__(self) -> str:
        return f"SaslCredentials({self.mechanism}, {self.username!r})"

    @property
    def identity(self) -> str:
        """Who logs in, for messages."""
        return f"as {self.username!r}"

    def exchange(self, nonce: str | None = None) -> Generator[bytes, bytes, None]:
        """Yield each token to send; receive the broker's answer to it. `nonce` is for tests."""
        if self.mechanism == "PLAIN":
            yield b"\0" + self.username.encode() + b"\0" + self.password.encode()
            return
        nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        yield from _scram(self.mechanism, self.username, self.password, nonce)


# -- OAUTHBEARER (RFC 7628), client side, with the token of the user's callback -----------------


class OAuthBearer:
    """The OAUTHBEARER login of one client: `oauth_cb`, its config string, and the token it gave last.

    Built in each process from the config (the actors unpickle the callback with it). The
    token is fetched at the first login and again when TOKEN_REFRESH_FRACTION of its life has
    passed or it has expired; never shown."""

    mechanism = OAUTHBEARER
    identity = "with the token of oauth_cb"

    def __init__(self, oauth_cb: Callable[[str | None], tuple[str, float]], oauthbearer_config: str | None = None,
                 clock: Callable[[], float] = time.time):
        if not callable(oauth_cb):
            raise ConfigError(f"oauth_cb: expected a callable, got a value of type {type(oauth_cb).__name__}")
        self.oauth_cb = oauth_cb
        self.oauthbearer_config = oauthbearer_config
        self.clock = clock
        self.calls = 0  # times oauth_cb was called in this process
        self._token: str | None = None
        self._refresh_at = 0.0  # epoch seconds: fetch a new token from then on
        self._fetching = threading.Lock()  # one call of oauth_cb at a time, whichever loop thread asks

    def __repr__(self) -> str:
        return f"OAuthBearer({getattr(self.oauth_cb, '__qualname__', type(self.oauth_cb).__name__)})"

    @property
    def due(self) -> bool:
        """Whether the next login calls `oauth_cb` (no token yet, or it is due for refresh)."""
        return self._token is None or self.clock() >= self._refresh_at

    def token(self) -> str:
        """The current token, from `oauth_cb` when there is none yet or it is due for refresh."""
        with self._fetching:
            if self.due:
                self._token, self._refresh_at = self._fetch(self.clock())
            assert self._token is not None
            return self._token

    def _fetch(self, now: float) -> tuple[str, float]:
        self.calls += 1
        try:
            answer = self.oauth_cb(self.oauthbearer_config)
        except Exception as exc:  # the user's code: its failure fails this login, named
            raise AuthenticationError(f"oauth_cb raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise AuthenticationError(f"oauth_cb must return (token, expiry in seconds since the epoch), "
                                      f"got a value of type {type(answer).__name__}")
        token, expiry = answer
        if not isinstance(token, str) or not _B64TOKEN.fullmatch(token):
            raise AuthenticationError("oauth_cb returned a token that is not an RFC 6750 bearer token "
                                      "(letters, digits, -._~+/ and trailing =)")
        if isinstance(expiry, bool) or not isinstance(expiry, (int, float)):
            raise AuthenticationError(f"oauth_cb returned an expiry of type {type(expiry).__name__}, "
                                      f"expected seconds since the epoch")
        if expiry <= now:
            raise AuthenticationError(f"oauth_cb returned a token that expired {now - expiry:.1f}s ago")
        return token, now + (expiry - now) * TOKEN_REFRESH_FRACTION

    def exchange(self) -> Generator[bytes, bytes, None]:
        """The client's first message; a non-empty answer is the broker's error challenge (RFC 7628
        section 3.2.2), which the client acknowledges with a lone separator before failing."""
        answer = yield b"n,," + _KVSEP + b"auth=Bearer " + self.token().encode() + _KVSEP + _KVSEP
        if answer:
            yield _KVSEP
            raise AuthenticationError(f"the broker refused the token: {_show(answer)}")


# -- SCRAM (RFC 5802), client side, without channel binding (gs2 header "n,,") as Kafka speaks it --


class ServerFirst(NamedTuple):
    """The parts of a server-first-message this client uses."""

    text: str
    nonce: str
    salt: bytes
    iterations: int


def _scram(mechanism: str, username: str, password: str, nonce: str) -> Generator[bytes, bytes, None]:
    digest = SCRAM_DIGESTS[mechanism]
    user = username.replace("=", "=3D").replace(",", "=2C")
    client_first_bare = f"n={user},r={nonce}"
    first = parse_server_first((yield ("n,," + client_first_bare).encode()), nonce, mechanism)
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), first.salt, first.iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={first.nonce}"
    auth_message = f"{client_first_bare},{first.text},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    server_signature = parse_server_final(final)
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    if not hmac.compare_digest(server_signature, hmac.new(server_key, auth_message, digest).digest()):
        raise AuthenticationError("the server signature does not verify: the broker does not know the password")


def parse_server_first(message: bytes, client_nonce: str, mechanism: str) -> ServerFirst:
    """`r=<nonce>,s=<salt>,i=<iterations>[,extensions]`, checked; else `AuthenticationError`."""
    what = "server-first-message"
    text, attributes = _attributes(message, what)
    names = [name for name, _ in attributes[:3]]
    if names != ["r", "s", "i"]:
        raise AuthenticationError(f"malformed {what}: expected r=, s=, i= in that order, got {_show(message)}")
    nonce, salt, iterations = (value for _, value in attributes[:3])
    if not _PRINTABLE.fullmatch(nonce):
        raise AuthenticationError(f"malformed {what}: the nonce is not printable ASCII: {_show(message)}")
    if not nonce.startswith(client_nonce) or len(nonce) == len(client_nonce):
        raise AuthenticationError(f"the server nonce does not extend the client nonce: {_show(message)}")
    salt_bytes = _base64(salt, f"the salt of the {what}")
    if not salt_bytes:
        raise AuthenticationError(f"the salt of the {what} is empty")
    if not (iterations.isascii() and iterations.isdigit() and len(iterations) <= 10):
        raise AuthenticationError(f"malformed {what}: the iteration count {iterations[:20]!r} is not a number")
    count = int(iterations)
    if count < SCRAM_MIN_ITERATIONS:
        raise AuthenticationError(f"the broker asks for {count} iterations, fewer than the minimum "
                                  f"{SCRAM_MIN_ITERATIONS} for {mechanism}")
    if count > SCRAM_MAX_ITERATIONS:
        raise AuthenticationError(f"the broker asks for {count} iterations, more than the maximum "
                                  f"{SCRAM_MAX_ITERATIONS} for {mechanism} (Kafka's own limit)")
    return ServerFirst(text, nonce, salt_bytes, count)


def parse_server_final(message: bytes) -> bytes:
    """The server signature of `v=<signature>[,extensions]`; `e=<error>` or else `AuthenticationError`."""
    what = "server-final-message"
    _text, attributes = _attributes(message, what)
    name, value = attributes[0]
    if name != "v":
        raise AuthenticationError(f"malformed {what}: expected v=, got {_show(message)}")
    return _base64(value, f"the server signature of the {what}")


def _attributes(message: bytes, what: str) -> tuple[str, list[tuple[str, str]]]:
    """The message's text and its `name=value` attributes; an `e=` error or a shape error raises."""
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"malformed {what}: not UTF-8: {_show(message)}") from None
    attributes = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name.isascii() or not name.isalpha():
            raise AuthenticationError(f"malformed {what}: {_show(item.encode())} is not an attribute "
                                      f"in {_show(message)}")
        attributes.append((name, value))
    first, value = attributes[0]
    if first == "e":
        raise AuthenticationError(f"the broker says {_show(value.encode())}")
    if first == "m":
        raise AuthenticationError(f"the {what} asks for a mandatory extension (m=) this client does not know")
    return text, attributes


def _base64(text: str, what: str) -> bytes:
    if not _BASE64.fullmatch(text):
        raise AuthenticationError(f"{what} is not valid base64: {_show(text.encode())}")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:  # the pattern above should leave no case for this
        raise AuthenticationError(f"{what} is not valid base64: {exc}") from None


def _show(data: bytes, limit: int = 120) -> str:
    """A broker's bytes for an error message: repr'd, and cut if long."""
    shown = repr(bytes(data[:limit]))
    return shown + ("..." if len(data) > limit else "")


# -- the login on a connection ------------------------------------------------------------------


async def authenticate(conn: _LoginConnection, sasl: SaslCredentials | OAuthBearer) -> int:
    """SaslHandshake v1, then the mechanism's exchange in SaslAuthenticate frames; the session
    lifetime in ms the broker gave in its last answer (SaslAuthenticate v1+; 0: none, or v0).

    Every failure is an `AuthenticationError` naming the mechanism, the user, the broker and
    the cause. A broker that does not offer the mechanism either says so with the list it
    offers (Kafka) or closes the connection (tansu 0.6.0).
    """
    who = f"SASL {sasl.mechanism} {sasl.identity} with {conn.host}:{conn.port}"
    timeout = conn.connect_timeout
    try:
        version = conn.version_for(messages.SASL_HANDSHAKE, 1)  # v0 would mean raw tokens without frames
        handshake = await conn.request(messages.SASL_HANDSHAKE, {"mechanism": sasl.mechanism}, version, timeout)
    except UnsupportedVersionError as exc:
        raise AuthenticationError(f"{who}: the broker does not speak SaslHandshake v1 ({exc})") from exc
    except BrokerConnectionError as exc:
        raise AuthenticationError(
            f"{who}: the broker closed the connection at SaslHandshake: it does not offer "
            f"{sasl.mechanism}, or does not do SASL at all") from exc
    except RequestTimedOutError as exc:
        raise AuthenticationError(f"{who}: no answer to SaslHandshake in {timeout:.1f}s") from exc
    if handshake.error_code:
        raise AuthenticationError(
            f"{who}: refused at SaslHandshake ({BrokerError(handshake.error_code)}); the broker offers "
            f"{', '.join(handshake.mechanisms) or 'no mechanism'}")
    try:
        if isinstance(sasl, OAuthBearer) and sasl.due:  # the callback may block: not on the loop
            await asyncio.to_thread(sasl.token)
        exchange = sasl.exchange()
        token = next(exchange)
    except AuthenticationError as exc:  # the token could not be had
        raise AuthenticationError(f"{who} failed: {exc}") from exc
    while True:
        try:
            response = await conn.request(messages.SASL_AUTHENTICATE, {"auth_bytes": token}, timeout=timeout)
        except BrokerConnectionError as exc:
            raise AuthenticationError(f"{who} failed: {exc}") from exc
        except RequestTimedOutError as exc:
            raise AuthenticationError(f"{who} failed: no answer to SaslAuthenticate in {timeout:.1f}s") from exc
        if response.error_code:
            raise AuthenticationError(
                f"{who} failed: {response.error_message or BrokerError(response.error_code)}")
        try:
            token = exchange.send(response.auth_bytes or b"")
        except StopIteration:
            return getattr(response, "session_lifetime_ms", 0) or 0
        except AuthenticationError as exc:
            raise AuthenticationError(f"{who} failed: {exc}") from exc
