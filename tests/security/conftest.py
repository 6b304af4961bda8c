"""Brokers for the security tests: tansu behind a TLS front, and tansu with SASL required.

tansu 0.6.0 cannot serve TLS itself: its `--cert` and `--key` flags sit in one clap group,
which makes them mutually exclusive ("the argument '--cert <CERT>' cannot be used with
'--key <KEY>'"), and `--cert` alone leaves a plaintext listener. So TLS is terminated by
`TlsFront`, a small asyncio TLS server (Python's OpenSSL) in front of a real tansu, which
advertises the front's port in Metadata. The certificates are a throwaway CA and a server
certificate for 127.0.0.1/localhost, made with the `openssl` command at session start.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port
from raykafka.wire.loop import LoopThread


@dataclass
class Certs:
    ca: Path  # the CA that signed `cert`
    cert: Path  # server certificate for localhost and 127.0.0.1
    key: Path
    other_ca: Path  # a CA that signed nothing here: verifying with it must fail


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=raykafka {name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=cwd)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    _make_ca("ca", d)
    _make_ca("other-ca", d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                  "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    return Certs(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key", other_ca=d / "other-ca.pem")


class TlsFront:
    """Accepts TLS on `port` and pipes the plaintext both ways to `target_port` (a stunnel)."""

    def __init__(self, target_port: int, cert: Path, key: Path, host: str = "127.0.0.1"):
        self.host = host
        self.port = free_port(host)
        self.target_port = target_port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.connections = 0  # TLS handshakes that completed
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

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


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """tansu with `--authentication`: every connection must pass SASL before anything but ApiVersions."""
    log = tmp_path_factory.mktemp("tansu-sasl") / "tansu.log"
    with EmbeddedBroker(extra_args=("--authentication",), log_path=log) as broker:
        yield broker
