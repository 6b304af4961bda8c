"""Brokers for the security tests: tansu behind a TLS front, tansu behind a SASL front, and
tansu with SASL required.

tansu 0.6.0 cannot serve TLS itself: its `--cert` and `--key` flags sit in one clap group,
which makes them mutually exclusive ("the argument '--cert <CERT>' cannot be used with
'--key <KEY>'"), and `--cert` alone leaves a plaintext listener. So TLS is terminated by
`TlsFront`, a small asyncio TLS server (Python's OpenSSL) in front of a real tansu, which
advertises the front's port in Metadata. The certificates are a throwaway CA, a server
certificate for 127.0.0.1/localhost, and one for another host name only, made with the
`openssl` command at session start.

tansu 0.6.0 with `--authentication` offers only SCRAM and cannot be given a SCRAM user (see
test_tls_sasl.py), so a successful login is shown against `SaslFront`: it answers
SaslHandshake and SaslAuthenticate itself for one known user (PLAIN, and the server side of
SCRAM-SHA-256/512 written here from RFC 5802, apart from the client's code), then pipes the
connection to a real tansu as `TlsFront` does. A test can make it hostile (a bad
server-first or server-final message, or no answer) to check the client's refusals.

It speaks OAUTHBEARER too (RFC 7628), checking each token with `raykafka.mock.oauth`'s issuer
key. With `session_lifetime_ms` set it gives each login a session lifetime (KIP-368: for
OAUTHBEARER, no longer than the token lives), then reads the client's frames itself rather
than piping bytes: a SaslHandshake starts a new login on the same connection, and any other
request after the session ended closes the connection, as a Kafka broker does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.mock.oauth import TokenRefused, check_token
from raykafka.wire import messages
from raykafka.wire.errors import BY_NAME
from raykafka.wire.loop import LoopThread
from raykafka.wire.protocol import decode_request, encode_response


@dataclass
class Certs:
    ca: Path  # the CA that signed `cert`
    cert: Path  # server certificate for localhost and 127.0.0.1
    key: Path
    other_ca: Path  # a CA that signed nothing here: verifying with it must fail
    other_host_cert: Path  # signed by `ca`, but for kafka.example.com only: not for 127.0.0.1/localhost
    other_host_key: Path
    encrypted_key: Path  # `key`, encrypted with `key_password` (a client key for ssl.key.password)
    key_password: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=raykafka {name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=cwd)


def _make_server_cert(name: str, cn: str, san: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                     "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=cwd)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    _make_ca("ca", d)
    _make_ca("other-ca", d)
    _make_server_cert("server", "localhost", "DNS:localhost,IP:127.0.0.1", d)
    _make_server_cert("other-host", "kafka.example.com", "DNS:kafka.example.com", d)
    key_password = "key-pass-" + os.urandom(6).hex()
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", f"pass:{key_password}",
             "-out", "server-encrypted.key", cwd=d)
    return Certs(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key", other_ca=d / "other-ca.pem",
                 other_host_cert=d / "other-host.pem", other_host_key=d / "other-host.key",
                 encrypted_key=d / "server-encrypted.key", key_password=key_password)


class TlsFront:
    """Accepts TLS on `port` and pipes the plaintext both ways to `target_port` (a stunnel).

    Without `cert` it accepts plain TCP (for `SaslFront`, which can run with or without TLS).
    """

    def __init__(self, target_port: int, cert: Path | None = None, key: Path | None = None,
                 host: str = "127.0.0.1"):
        self.host = host
        self.port = free_port(host)
        self.target_port = target_port
        self.context: ssl.SSLContext | None = None
        if cert is not None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.context.load_cert_chain(cert, key)
        self.connections = 0  # connections accepted (with TLS: handshakes that completed)
        self._loop = LoopThread("tls-front")
        self._server: asyncio.Server | None = None

    def start(self) -> TlsFront:
        self._server = self._loop.run(asyncio.start_server(self._serve, self.host, self.port, ssl=self.context), 10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

        with contextlib.suppress(Exception):
            self._loop.run(close(), 5)
        self._loop.stop()

    async def _upstream(self, writer: asyncio.StreamWriter) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the broker behind the front, counted; None (the client's closed) when
        the broker refuses it."""
        self.connections += 1
        try:
            return await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._upstream(writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        try:
            admitted = await self._admit(reader, writer, up_reader, up_writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            admitted = False
        if not admitted:
            writer.close()
            up_writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        """Whether to pipe this connection through: every one, here."""
        return True

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


@dataclass
class TlsBroker:
    bootstrap: str  # the TLS front's host:port
    broker: EmbeddedBroker
    front: TlsFront
    certs: Certs


@pytest.fixture(scope="module")
def tls_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    port = free_port()
    front = TlsFront(port, certs.cert, certs.key).start()
    log = tmp_path_factory.mktemp("tansu-tls") / "tansu.log"
    try:
        with EmbeddedBroker(port=port, advertised_port=front.port, log_path=log) as broker:
            yield TlsBroker(f"{front.host}:{front.port}", broker, front, certs)
    finally:
        front.stop()


# -- SASL front: Kafka's SASL exchange answered here, then the bytes piped to a real tansu -------

SASL_AUTHENTICATION_FAILED = BY_NAME["SASL_AUTHENTICATION_FAILED"].code
UNSUPPORTED_SASL_MECHANISM = BY_NAME["UNSUPPORTED_SASL_MECHANISM"].code
SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


class LoginRefused(Exception):
    """The client's credentials or messages are not acceptable (the text goes to the client)."""


class ScramServer:
    """The server side of one SCRAM exchange (RFC 5802 section 5), for users whose passwords it knows."""

    def __init__(self, mechanism: str, users: dict[str, str], iterations: int):
        self.hash = SCRAM_HASHES[mechanism]
        self.users = users
        self.iterations = iterations
        self.client_nonce = ""

    def first(self, client_first: bytes) -> bytes:
        gs2, _, bare = client_first.decode().partition(",,")
        attributes = dict(item.split("=", 1) for item in bare.split(","))
        user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
        if gs2 != "n" or user not in self.users:
            raise LoginRefused("unknown user")
        self.client_nonce = attributes["r"]
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(self.hash().name, self.users[user].encode(), salt, self.iterations)
        self.stored_key = self.hash(self._hmac(salted, b"Client Key")).digest()
        self.server_key = self._hmac(salted, b"Server Key")
        self.nonce = self.client_nonce + base64.b64encode(os.urandom(18)).decode()
        self.client_first_bare = bare
        self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={self.iterations}"
        return self.server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        without_proof, _, proof = client_final.decode().rpartition(",p=")
        if without_proof != f"c=biws,r={self.nonce}":
            raise LoginRefused("bad client-final-message")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        client_signature = self._hmac(self.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), client_signature, strict=False))
        if self.hash(client_key).digest() != self.stored_key:
            raise LoginRefused("invalid credentials")
        return b"v=" + base64.b64encode(self._hmac(self.server_key, auth_message))

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash).digest()


def _plain_login(token: bytes, users: dict[str, str]) -> None:
    _authzid, user, password = token.decode().split("\0")
    if users.get(user) != password:
        raise LoginRefused("invalid credentials")


OAUTH_ERROR_CHALLENGE = b'{"status":"invalid_token"}'  # RFC 7628 section 3.2.2


def _bearer_token(client_first: bytes) -> str:
    """The token of an RFC 7628 client first message `n,,\x01auth=Bearer <token>\x01\x01`."""
    gs2, sep, rest = client_first.partition(b"\x01")
    pairs = dict(item.split(b"=", 1) for item in rest.split(b"\x01") if item)
    scheme, _, token = pairs.get(b"auth", b"").partition(b" ")
    if gs2 != b"n,," or not sep or not rest.endswith(b"\x01\x01") or scheme != b"Bearer" or not token:
        raise LoginRefused("malformed OAUTHBEARER client first message")
    return token.decode()


@dataclass
class Hostility:
    """How `SaslFront` misbehaves: each hook takes what an honest server would send and returns what to send."""

    server_first: Callable[[ScramServer, bytes], bytes] | None = None
    server_final: Callable[[ScramServer, bytes], bytes] | None = None
    silent: bool = False  # never answer SaslAuthenticate


@dataclass
class LoginLog:
    logins: dict[str, int] = field(default_factory=dict)  # mechanism -> successful logins
    refusals: list[str] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set, repr=False)  # the OAUTHBEARER tokens accepted
    reauthentications: int = 0  # logins again on a connection already logged in
    reauthentications_by: dict[str, int] = field(default_factory=dict)  # the same, by client.id
    expired: int = 0  # connections closed for a request after their session ended


class SaslFront(TlsFront):
    """Kafka's SASL gate for `users` before a real tansu, with or without TLS.

    Per connection, as a Kafka broker with a SASL listener: ApiVersions is answered by tansu;
    SaslHandshake v1 picks PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; SaslAuthenticate frames
    carry the exchange; a wrong password is answered SASL_AUTHENTICATION_FAILED and the
    connection closed; any other request before a login closes the connection. After a
    login every byte is piped both ways to tansu.
    """

    MECHANISMS = ("PLAIN", *SCRAM_HASHES, "OAUTHBEARER")

    def __init__(self, target_port: int, users: dict[str, str], cert: Path | None = None,
                 key: Path | None = None, iterations: int = 4096):
        super().__init__(target_port, cert, key)
        self.users = users
        self.iterations = iterations
        self.hostility = Hostility()
        self.log = LoginLog()
        self.oauth_key = "issuer-key-" + os.urandom(8).hex()  # the key OAUTHBEARER tokens must be signed with
        self.session_lifetime_ms = 0  # 0: logins have no session lifetime, and bytes are piped

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.session_lifetime_ms:
            await super()._serve(reader, writer)
            return
        upstream = await self._upstream(writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        try:
            session_ends = await self._login(reader, writer, up_reader, up_writer)
            if session_ends is None:
                return
            to_client = asyncio.get_running_loop().create_task(self._frames_to(up_reader, writer))
            try:
                while True:
                    frame = await _read_frame(reader)
                    if struct.unpack_from(">h", frame)[0] == messages.SASL_HANDSHAKE.key:
                        client_id = decode_request(frame, messages.APIS)[3] or ""
                        session_ends = await self._login(reader, writer, up_reader, up_writer, frame)
                        if session_ends is None:
                            return
                        self.log.reauthentications += 1
                        by = self.log.reauthentications_by
                        by[client_id] = by.get(client_id, 0) + 1
                    elif time.monotonic() >= session_ends:
                        self.log.expired += 1  # as Kafka: a request after the session ended closes the connection
                        return
                    else:
                        up_writer.write(struct.pack(">i", len(frame)) + frame)
            finally:
                to_client.cancel()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()

    @staticmethod
    async def _frames_to(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The broker's responses to the client, whole frames at a time (the logins' answers go between)."""
        try:
            while True:
                frame = await _read_frame(reader)
                writer.write(struct.pack(">i", len(frame)) + frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        return await self._login(reader, writer, up_reader, up_writer) is not None

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                     frame: bytes | None = None) -> float | None:
        """One login (`frame`: its SaslHandshake, already read): when its session ends (monotonic
        s; infinity without a lifetime), or None if it was refused."""
        mechanism: str | None = None
        scram: ScramServer | None = None
        challenged = False  # OAUTHBEARER: the error challenge was sent, the client's \x01 is due
        while True:
            if frame is None:
                frame = await _read_frame(reader)
            current, frame = frame, None
            if struct.unpack_from(">h", current)[0] == messages.API_VERSIONS.key:
                up_writer.write(struct.pack(">i", len(current)) + current)
                response = await _read_frame(up_reader)
                writer.write(struct.pack(">i", len(response)) + response)
                continue
            api, version, correlation_id, _client_id, body = decode_request(current, messages.APIS)
            if api is messages.SASL_HANDSHAKE and version >= 1 and mechanism is None:
                known = body.mechanism in self.MECHANISMS
                mechanism = body.mechanism if known else None
                writer.write(encode_response(api, version, correlation_id, {
                    "error_code": 0 if known else UNSUPPORTED_SASL_MECHANISM,
                    "mechanisms": list(self.MECHANISMS)}))
                if not known:
                    return None
            elif api is messages.SASL_AUTHENTICATE and mechanism is not None:
                if self.hostility.silent:
                    await reader.read()  # until the client gives up and closes
                    return None
                lifetime_s = self.session_lifetime_ms / 1000
                try:
                    if challenged:
                        raise LoginRefused("invalid_token")
                    if mechanism == "PLAIN":
                        _plain_login(body.auth_bytes, self.users)
                        answer, done = b"", True
                    elif mechanism == "OAUTHBEARER":
                        token = _bearer_token(body.auth_bytes)
                        try:
                            left_s = check_token(self.oauth_key, token) - time.time()
                            if lifetime_s:  # Kafka: a session ends when its token does, at the latest
                                lifetime_s = min(lifetime_s, left_s)
                        except TokenRefused as exc:
                            self.log.refusals.append(f"{mechanism}: {exc}")
                            challenged = True
                            writer.write(encode_response(api, version, correlation_id, {
                                "error_code": 0, "error_message": None, "auth_bytes": OAUTH_ERROR_CHALLENGE}))
                            continue
                        self.log.tokens.add(token)
                        answer, done = b"", True
                    elif scram is None:
                        scram = ScramServer(mechanism, self.users, self.iterations)
                        answer, done = self._as_hostile("server_first", scram, scram.first(body.auth_bytes)), False
                    else:
                        answer, done = self._as_hostile("server_final", scram, scram.final(body.auth_bytes)), True
                except (LoginRefused, ValueError, KeyError) as exc:
                    self.log.refusals.append(f"{mechanism}: {exc}")
                    writer.write(encode_response(api, version, correlation_id, {
                        "error_code": SASL_AUTHENTICATION_FAILED, "auth_bytes": b"",
                        "error_message": f"Authentication failed during authentication due to invalid "
                                         f"credentials with SASL mechanism {mechanism}"}))
                    await writer.drain()
                    return None
                lifetime_ms = int(lifetime_s * 1000) if done and lifetime_s else 0
                writer.write(encode_response(api, version, correlation_id, {
                    "error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": lifetime_ms}))
                if done:
                    self.log.logins[mechanism] = self.log.logins.get(mechanism, 0) + 1
                    return time.monotonic() + lifetime_ms / 1000 if lifetime_ms else float("inf")
            else:
                return None  # as Kafka: anything else before a login ends the connection

    def _as_hostile(self, message: str, scram: ScramServer, honest: bytes) -> bytes:
        tamper = getattr(self.hostility, message)
        return honest if tamper is None else tamper(scram, honest)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


@dataclass
class SaslBroker:
    bootstrap: str  # the SASL front's host:port
    broker: EmbeddedBroker
    front: SaslFront
    user: str
    password: str


SASL_USER = "alice"


@contextlib.contextmanager
def _sasl_broker(log: Path, cert: Path | None = None, key: Path | None = None) -> Iterator[SaslBroker]:
    port = free_port()
    password = "alice-pw-" + os.urandom(8).hex()
    front = SaslFront(port, {SASL_USER: password}, cert, key).start()
    try:
        with EmbeddedBroker(port=port, advertised_port=front.port, log_path=log) as broker:
            yield SaslBroker(f"{front.host}:{front.port}", broker, front, SASL_USER, password)
    finally:
        front.stop()


@pytest.fixture(scope="module")
def sasl_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    """tansu behind a plaintext SASL front (security.protocol=sasl_plaintext)."""
    with _sasl_broker(tmp_path_factory.mktemp("tansu-sasl-front") / "tansu.log") as broker:
        yield broker


@pytest.fixture()
def hostility(sasl_front: SaslBroker) -> Iterator[Hostility]:
    """The plaintext SASL front's misbehaviour for one test (set its fields); honest again afterwards."""
    sasl_front.front.hostility = Hostility()
    yield sasl_front.front.hostility
    sasl_front.front.hostility = Hostility()


@pytest.fixture(scope="module")
def sasl_tls_front(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    """tansu behind a SASL front that speaks TLS (security.protocol=sasl_ssl)."""
    with _sasl_broker(tmp_path_factory.mktemp("tansu-sasl-tls-front") / "tansu.log", certs.cert, certs.key) as broker:
        yield broker


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """tansu with `--authentication`: every connection must pass SASL before anything but ApiVersions."""
    log = tmp_path_factory.mktemp("tansu-sasl") / "tansu.log"
    with EmbeddedBroker(extra_args=("--authentication",), log_path=log) as broker:
        yield broker
