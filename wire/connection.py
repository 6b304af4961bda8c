"""One connection to one broker: asyncio, many requests in flight, matched by correlation id.

`BrokerConnection.connect` opens the socket (TLS if configured), negotiates versions with
ApiVersions, then authenticates with SASL if configured. When the broker gives the login a
session lifetime (KIP-368), the connection logs in again before REAUTHENTICATE_FRACTION of it
has passed: the first request sent after that point starts the new login, which waits for
the requests in flight to be answered, then runs SaslHandshake and SaslAuthenticate on the
same socket; the requests sent meanwhile are held and written, in order, after it (as the
Java client, which never re-authenticates with requests in flight). `request` writes a frame and waits
for the response with the same correlation id, up to `request.timeout.ms`: the wait for the
broker to take the bytes (`drain`, which never ends if it stops reading) and the wait for the
answer share that one bound. When the connection drops, every pending request fails with
`BrokerConnectionError`; a request that times out fails with `RequestTimedOutError` and closes
the connection (as the Java client does: the responses behind it can no longer be trusted to
come). Closing after a failure aborts the socket rather than waiting to flush it.

A response to a request sent without waiting for one (acks=0 Produce: Kafka never answers it,
tansu does) is dropped. A response with any other correlation id that no request is waiting
for means the stream is out of step: the connection is reset and every request in flight on
it fails with `UnknownCorrelationIdError`, which is retriable on a new connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import struct
from collections import deque
from typing import Any, NamedTuple

from . import messages
from .errors import (
    BY_NAME,
    AuthenticationError,
    BrokerConnectionError,
    BrokerError,
    ConfigError,
    DecodeError,
    RequestTimedOutError,
    ResponseTooLargeError,
    UnknownCorrelationIdError,
    UnsupportedVersionError,
)
from .protocol import Api, Struct, decode_response_header, encode_request
from .sasl import OAUTHBEARER, OAuthBearer, SaslCredentials, authenticate

log = logging.getLogger("raykafka.wire.connection")

_SIZE = struct.Struct(">i")
_UNSUPPORTED_VERSION = BY_NAME["UNSUPPORTED_VERSION"].code
# The most a response may hold: a Fetch's, the `max_bytes` its request asked for plus
# RESPONSE_MARGIN (its headers: topic and partition entries, watermarks, aborted transaction
# lists; a megabyte holds those of some ten thousand partitions); any other response's,
# MAX_RESPONSE_BYTES. A larger frame is refused before it is read (ResponseTooLargeError).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
RESPONSE_MARGIN = 1024 * 1024
_CORRELATION_IDS = 0x7FFFFFFF  # a request's correlation id is its send number, wrapped to an int32
# a connection logs in again once this share of the session lifetime its broker gave has passed
# (the Java client picks at random between 85% and 95%; a fixed share keeps tests exact)
REAUTHENTICATE_FRACTION = 0.85


class InFlight(NamedTuple):
    """A request written and waiting for its response, by correlation id."""

    future: asyncio.Future[Struct]
    api: Api
    version: int
    sent: int  # its send number on the connection (`_Unanswered`)
    bound: int  # the largest response it allows, in bytes (`response_bound`)


class Held(NamedTuple):
    """A request held back while the connection logs in again, written after it."""

    api: Api
    body: Any
    version: int | None
    future: asyncio.Future[Struct] | None


class _Unanswered:
    """The requests sent without waiting for a response, on one connection, by send number.

    Kept as runs of consecutive send numbers. A broker answers in request order, so when a
    later request is answered the ones before it never will be (Kafka's acks=0): they are
    forgotten, and at most a run is kept per request still in flight."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: deque[list[int]] = deque()  # [first, last] send numbers, oldest first

    def add(self, sent: int) -> None:
        if self._runs and self._runs[-1][1] == sent - 1:
            self._runs[-1][1] = sent
        else:
            self._runs.append([sent, sent])

    def forget_before(self, sent: int) -> None:
        """The request sent `sent`-th was answered: none sent before it will be."""
        runs = self._runs
        while runs and runs[0][1] < sent:
            runs.popleft()
        if runs and runs[0][0] < sent:
            runs[0][0] = sent

    def answered(self, correlation_id: int) -> bool:
        """Whether `correlation_id` is one of these requests (then it and those before it are
        forgotten)."""
        if not 0 <= correlation_id <= _CORRELATION_IDS:
            return False
        for first, last in self._runs:
            sent = first + ((correlation_id - first) & _CORRELATION_IDS)
            if sent <= last:
                self.forget_before(sent + 1)
                return True
        return False


class BrokerConnection:
    """The connection to broker `node_id` at `host:port`."""

    def __init__(self, host: str, port: int, *, node_id: int = -1, client_id: str = "raykafka",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslCredentials | OAuthBearer | None = None):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, InFlight] = {}
        self._unanswered = _Unanswered()
        self._sent = 0  # requests sent on this object, across reconnects: the next one's send number
        self._closed_error: Exception | None = None
        self._reauthenticate_at: float | None = None  # loop time to log in again by (None: never)
        self._reauthentication: asyncio.Task[None] | None = None
        # requests sent while it runs, written after it: (api, body, version, future or None)
        self._held: list[Held] = []
        self.reauthentications = 0  # logins again on the same socket

    def __repr__(self) -> str:
        return f"BrokerConnection(node={self.node_id}, {self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> BrokerConnection:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.connect_timeout)
        except (TimeoutError, OSError) as exc:
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc or 'timed out'}") from exc
        if self.ssl_context is not None:
            await self._start_tls(self.ssl_context)
        self._closed_error = None
        self._unanswered = _Unanswered()
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate_versions()
            if self.sasl is not None:
                self._schedule_reauthentication(await authenticate(self, self.sasl))
        except BaseException:
            await self.close()
            raise
        return self

    async def _start_tls(self, context: ssl.SSLContext) -> None:
        """Upgrade the connected socket to TLS, apart from the TCP connect so a failure names TLS.

        A plaintext listener reads the ClientHello as the start of a huge frame and never
        answers, so a handshake that stalls past `socket.connection.setup.timeout.ms` fails too.
        """
        writer = self._writer
        assert writer is not None
        try:
            await asyncio.wait_for(writer.start_tls(context, server_hostname=self.host), self.connect_timeout)
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            writer.close()
            self._reader = self._writer = None
            reason = (f"no answer in {self.connect_timeout:.1f}s (is the listener TLS?)"
                      if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__)
            raise AuthenticationError(f"TLS handshake with {self.host}:{self.port} failed: {reason}") from exc

    async def close(self, error: Exception | None = None) -> None:
        """Close the socket and fail every pending request with `error`.

        With an error the socket is aborted: what it still holds unsent is dropped, as a broker
        that stopped reading would never take it. Without one, it may flush for up to
        `request.timeout.ms`, then is aborted all the same."""
        self._fail_pending(error or BrokerConnectionError(f"connection to {self.host}:{self.port} closed"))
        login, self._reauthentication = self._reauthentication, None
        if login is not None and login is not asyncio.current_task():
            login.cancel()
        writer, self._writer = self._writer, None
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - already reported to waiters
                pass
        if writer is not None:
            if error is not None:
                writer.transport.abort()
            else:
                writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), self.request_timeout)
            except TimeoutError:
                writer.transport.abort()
            except (OSError, ssl.SSLError, asyncio.CancelledError):
                pass

    def _fail_pending(self, error: Exception, held_too: bool = True) -> None:
        """Fail every request in flight with `error`, and those held for a login again unless
        `held_too` is false (the login then fails them with its own cause, a refusal included)."""
        self._closed_error = error
        pending, self._pending = self._pending, {}
        held, self._held = (self._held, []) if held_too else ([], self._held)
        self._reauthenticate_at = None
        for future in [request.future for request in pending.values()] + [request.future for request in held]:
            if future is not None and not future.done():
                future.set_exception(error)

    # -- logging in again before the session ends (KIP-368) ---------------------

    def _schedule_reauthentication(self, session_lifetime_ms: int) -> None:
        self._reauthenticate_at = (None if session_lifetime_ms <= 0 else asyncio.get_running_loop().time()
                                   + session_lifetime_ms / 1000 * REAUTHENTICATE_FRACTION)

    def _reauthentication_due(self) -> bool:
        if self._reauthentication is not None:
            return asyncio.current_task() is not self._reauthentication  # its own requests go out
        at = self._reauthenticate_at
        if at is None or asyncio.get_running_loop().time() < at:
            return False
        self._reauthentication = asyncio.get_running_loop().create_task(self._reauthenticate())
        return True

    async def _reauthenticate(self) -> None:
        """Wait for the requests in flight, log in again, then write the requests held meanwhile."""
        assert self.sasl is not None
        try:
            in_flight = [request.future for request in self._pending.values()]
            if in_flight:
                await asyncio.wait(in_flight)
            if self._closed_error is None:
                self._schedule_reauthentication(await authenticate(self, self.sasl))
                self.reauthentications += 1
                log.debug("%s: logged in again (SASL %s)", self, self.sasl.mechanism)
        except Exception as exc:  # noqa: BLE001 - every request held or in flight hears of it
            await self.close(exc if isinstance(exc, AuthenticationError) else BrokerConnectionError(
                f"logging in again to {self.host}:{self.port} failed: {exc}"))
            return
        finally:
            if self._reauthentication is asyncio.current_task():
                self._reauthentication = None
        held, self._held = self._held, []
        for api, body, version, future in held:
            if self._closed_error is not None:
                if future is not None and not future.done():
                    future.set_exception(self._closed_error)
                continue
            try:
                self._write(api, body, version, future)
            except Exception as exc:  # noqa: BLE001 - this request's caller hears of it
                if future is not None and not future.done():
                    future.set_exception(exc)

    # -- requests ----------------------------------------------------------

    def version_for(self, api: Api, wanted: int | None = None) -> int:
        """The highest version of `api` that both sides speak (or `wanted`, if both speak it)."""
        broker = self.versions.get(api.key)
        if broker is None:
            raise UnsupportedVersionError(f"broker {self.node_id} does not support {api.name}")
        low, high = max(broker[0], api.min_version), min(broker[1], api.max_version)
        if low > high:
            raise UnsupportedVersionError(
                f"{api.name}: broker {self.node_id} speaks v{broker[0]}-{broker[1]}, we speak v{api.min_version}-{api.max_version}")
        if wanted is not None:
            if not low <= wanted <= high:
                raise UnsupportedVersionError(f"{api.name} v{wanted} is not spoken by broker {self.node_id}")
            return wanted
        return high

    def send_nowait(self, api: Api, body: Any, version: int | None = None,
                    expect_response: bool = True) -> asyncio.Future[Struct] | None:
        """Write a request now; return the future of its response (None when none is expected).

        Writing synchronously keeps requests on the wire in the order they were sent.
        """
        if self._writer is None or self._closed_error is not None:
            raise BrokerConnectionError(f"not connected to {self.host}:{self.port}"
                                        + (f" ({self._closed_error})" if self._closed_error else ""))
        if version is None:
            version = self.version_for(api)
        future: asyncio.Future[Struct] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
        if self._reauthentication_due():
            self._held.append(Held(api, body, version, future))
        else:
            self._write(api, body, version, future)
        return future

    def _write(self, api: Api, body: Any, version: int, future: asyncio.Future[Struct] | None) -> None:
        """Encode and write one request now; its response goes to `future` (None: none expected)."""
        if self._writer is None or self._closed_error is not None:
            raise BrokerConnectionError(f"not connected to {self.host}:{self.port}"
                                        + (f" ({self._closed_error})" if self._closed_error else ""))
        sent = self._sent
        correlation_id = sent & _CORRELATION_IDS
        frame = encode_request(api, version, correlation_id, self.client_id, body)
        self._sent += 1
        if future is not None:
            self._pending[correlation_id] = InFlight(future, api, version, sent, response_bound(api, body))
        else:
            self._unanswered.add(sent)
        self._writer.write(frame)

    async def request(self, api: Api, body: Any, version: int | None = None,
                      timeout: float | None = None) -> Struct:
        """Send one request and wait for its response."""
        future = self.send_nowait(api, body, version)
        assert future is not None
        return await self.wait(future, api, timeout)

    async def wait(self, future: asyncio.Future[Struct], api: Api, timeout: float | None = None) -> Struct:
        """The response of a request sent by `send_nowait`: its bytes taken by the broker, then
        its answer, both within `timeout` (default `request.timeout.ms`)."""
        timeout = timeout or self.request_timeout
        written = False
        try:
            async with asyncio.timeout(timeout):
                if self._writer is not None:
                    try:
                        await self._writer.drain()
                    except (OSError, ssl.SSLError) as exc:
                        await self.close(BrokerConnectionError(f"write to {self.host}:{self.port} failed: {exc}"))
                written = True
                return await asyncio.shield(future)
        except TimeoutError:
            what = "got no response" if written else "did not take the request (it stopped reading)"
            error = RequestTimedOutError(
                f"{api.name} to broker {self.node_id} ({self.host}:{self.port}) {what} in {timeout:.1f}s")
            future.cancel()  # this wait reports it; no one else awaits its future
            await self.close(error)
            raise error from None

    async def _read_loop(self) -> None:
        """Responses, frame by frame, to the futures waiting for them. Ends, failing every
        pending request, when the stream ends or can no longer be trusted."""
        reader = self._reader
        assert reader is not None
        where = f"broker {self.node_id} ({self.host}:{self.port})"
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if size < 4:
                    raise DecodeError(f"response size {size} out of range")
                # the frame answers one of the requests waiting: it may hold what the largest allows
                allowed = max((request.bound for request in self._pending.values()), default=MAX_RESPONSE_BYTES)
                if size > allowed:
                    raise ResponseTooLargeError(
                        f"{where} sent a response frame of {size} bytes; the requests waiting allow at most "
                        f"{allowed} (a Fetch's max_bytes + {RESPONSE_MARGIN}); the connection is closed")
                frame = await reader.readexactly(size)
                correlation_id = _SIZE.unpack_from(frame, 0)[0]
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    if self._unanswered.answered(correlation_id):
                        continue  # an answer to an acks=0 Produce (tansu gives them)
                    raise UnknownCorrelationIdError(
                        f"{where} answered correlation id {correlation_id}, which no request on this "
                        f"connection is waiting for; the connection is reset")
                future, api, version, sent, bound = entry
                self._unanswered.forget_before(sent)
                if future.done():
                    continue
                if size > bound:
                    future.set_exception(ResponseTooLargeError(
                        f"{api.name} response from {where} is {size} bytes, more than the {bound} its request "
                        f"allows"))
                    continue
                try:
                    _, pos = decode_response_header(api, version, frame)
                    future.set_result(api.response.decode(version, frame, pos))
                except DecodeError as exc:
                    future.set_exception(exc)
        except asyncio.CancelledError:
            raise
        except (UnknownCorrelationIdError, ResponseTooLargeError) as exc:
            error: Exception = exc
        except (asyncio.IncompleteReadError, OSError, ssl.SSLError, DecodeError) as exc:
            text = "closed by the broker" if isinstance(exc, asyncio.IncompleteReadError) else str(exc)
            error = BrokerConnectionError(f"connection to {where} lost: {text}")
        except Exception as exc:  # a bug of ours: still, every waiting request hears of it
            log.exception("%s: reading responses failed", self)
            error = BrokerConnectionError(f"connection to {where} lost: {type(exc).__name__}: {exc}")
        self._fail_pending(error, held_too=self._reauthentication is None)
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None

    # -- handshakes --------------------------------------------------------

    async def _negotiate_versions(self) -> None:
        api = messages.API_VERSIONS
        body = {"client_software_name": "raykafka", "client_software_version": "0.1.0"}
        response = await self.request(api, body, version=api.max_version)
        if response.error_code == _UNSUPPORTED_VERSION:  # the answer lists what it speaks, in v0
            spoken = {k.api_key: k.max_version for k in response.api_keys}
            version = min(spoken.get(api.key, 0), api.max_version)
            response = await self.request(api, body, version=version)
        if response.error_code:
            raise BrokerError(response.error_code, f"ApiVersions to {self.host}:{self.port}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def response_bound(api: Api, body: Any) -> int:
    """The most bytes the response to `body` may hold: a Fetch's `max_bytes` (`fetch.max.bytes`)
    plus RESPONSE_MARGIN; for any other request, MAX_RESPONSE_BYTES."""
    if api.key == messages.FETCH.key:
        max_bytes = body.get("max_bytes") if isinstance(body, dict) else getattr(body, "max_bytes", None)
        if isinstance(max_bytes, int) and max_bytes > 0:
            return max_bytes + RESPONSE_MARGIN
    return MAX_RESPONSE_BYTES


def security_from_config(config: dict[str, Any]) -> tuple[ssl.SSLContext | None,
                                                          SaslCredentials | OAuthBearer | None]:
    """The TLS context and SASL credentials that `security.protocol` and friends ask for.

    Kafka's property names: `ssl.ca.location` (file or directory; the system's CAs when
    unset), `ssl.certificate.location` + `ssl.key.location` (+ `ssl.key.password`) for a
    client certificate, `ssl.endpoint.identification.algorithm` (`https`: check the host
    name, `none`: don't), `sasl.mechanism`, `sasl.username`, `sasl.password`; for
    OAUTHBEARER, `oauth_cb` and `sasl.oauthbearer.config`.
    """
    protocol = str(config.get("security.protocol") or "plaintext").lower()
    context = None
    if protocol in ("ssl", "sasl_ssl"):
        context = _ssl_context(config)
    sasl: SaslCredentials | OAuthBearer | None = None
    if protocol in ("sasl_plaintext", "sasl_ssl") and str(config.get("sasl.mechanism")).upper() == OAUTHBEARER:
        if config.get("oauth_cb") is None:
            raise ConfigError("oauth_cb: sasl.mechanism=OAUTHBEARER needs oauth_cb")
        sasl = OAuthBearer(config["oauth_cb"], config.get("sasl.oauthbearer.config"))
    elif protocol in ("sasl_plaintext", "sasl_ssl"):
        for key in ("sasl.username", "sasl.password"):
            if config.get(key) is None:
                raise ConfigError(f"{key}: security.protocol={protocol} needs sasl.username and sasl.password")
        sasl = SaslCredentials(config.get("sasl.mechanism") or "PLAIN", config["sasl.username"], config["sasl.password"])
    return context, sasl


def _ssl_context(config: dict[str, Any]) -> ssl.SSLContext:
    ca = config.get("ssl.ca.location")
    key = "ssl.ca.location"
    try:
        if ca and os.path.isdir(ca):
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca)
        if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() in ("none", ""):
            context.check_hostname = False
        if config.get("ssl.certificate.location"):
            key = "ssl.certificate.location"
            context.load_cert_chain(config["ssl.certificate.location"], config.get("ssl.key.location"),
                                    config.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{key}: cannot load {config.get(key)!r}: {exc}") from exc
    return context
