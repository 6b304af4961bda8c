"""A broker connection ends every request in bounded time with a named error, against a real TCP
peer that misbehaves: one that stops reading (its socket buffers fill, so `drain` would wait
for ever), and one that answers a correlation id nobody asked for.

The peer is a plain socket server on a free loopback port, in a thread: it answers ApiVersions
as a broker does, then runs the test's script on the connection."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from raykafka.wire import messages
from raykafka.wire.connection import _CORRELATION_IDS, BrokerConnection, _Unanswered
from raykafka.wire.errors import RequestTimedOutError, UnknownCorrelationIdError
from raykafka.wire.protocol import decode_request, encode_response

pytestmark = pytest.mark.timeout(60)


class Peer:
    """A one-connection TCP server: answers ApiVersions, then hands the socket to `script`."""

    def __init__(self, script: Callable[[Peer, socket.socket], None]):
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()  # set by the test when the peer may hang up
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Peer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)
        self.listener.close()
        assert not self.thread.is_alive(), "the peer did not finish"
        if self.error is not None:
            raise self.error

    def _serve(self) -> None:
        try:
            sock, _ = self.listener.accept()
            with sock:
                sock.settimeout(10)
                api, version, correlation_id, _client, _body = self.read_request(sock)
                assert api is messages.API_VERSIONS
                spoken = [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                          for a in messages.APIS.values()]
                sock.sendall(encode_response(api, version, correlation_id,
                                             {"error_code": 0, "api_keys": spoken, "throttle_time_ms": 0}))
                self.script(self, sock)
        except BaseException as exc:  # reported by __exit__, in the test
            self.error = exc

    @staticmethod
    def read_request(sock: socket.socket) -> tuple:
        (size,) = struct.unpack(">i", Peer._read_exactly(sock, 4))
        return decode_request(Peer._read_exactly(sock, size), messages.APIS)

    @staticmethod
    def _read_exactly(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the client hung up")
            data += chunk
        return data


def _metadata_response(version: int) -> dict:
    return {"brokers": [], "topics": [], "controller_id": -1, "cluster_id": None}


def _run(coro, bound: float = 30.0):
    """Run `coro`, failing (not hanging) if it takes longer than `bound` seconds."""
    async def bounded():
        try:
            return await asyncio.wait_for(coro, bound)
        except TimeoutError:
            raise AssertionError(f"still waiting after {bound}s: the call is not bounded") from None
    return asyncio.run(bounded())


# ---------------------------------------------------------------------------- a broker that stops reading


def _never_read(peer: Peer, sock: socket.socket) -> None:
    peer.done.wait(30)  # the socket stays open, and nothing more is read from it


def test_a_broker_that_stops_reading_times_the_request_out():
    """A Produce request of 64 MiB to a peer that never reads: the kernel's buffers fill, and
    the request fails with RequestTimedOutError once request.timeout.ms (0.5 s) has passed,
    naming the broker; closing the connection is bounded too."""
    records = bytes(64 << 20)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}

    async def scenario() -> tuple[BaseException, float]:
        conn = await BrokerConnection("127.0.0.1", peer.port, node_id=7, request_timeout_ms=500).connect()
        start = time.monotonic()
        try:
            await conn.request(messages.PRODUCE, body)
        except RequestTimedOutError as exc:
            return exc, time.monotonic() - start
        finally:
            await conn.close()
        raise AssertionError("the request succeeded against a peer that reads nothing")

    with Peer(_never_read) as peer:
        error, took = _run(scenario())
    assert "Produce to broker 7 (127.0.0.1:" in str(error)
    assert "did not take the request (it stopped reading) in 0.5s" in str(error)
    assert error.retriable
    assert 0.4 < took < 20


def test_a_request_answered_in_time_on_a_slow_reader_is_not_timed_out_by_its_write():
    """The write and the answer share one bound: a large request that the peer reads, then
    answers, completes."""
    records = bytes(8 << 20)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}]}

    def read_then_answer(peer: Peer, sock: socket.socket) -> None:
        api, version, correlation_id, _, request = peer.read_request(sock)
        assert len(request.topic_data[0].partition_data[0].records) == len(records)
        answer = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0,
                                                                       "base_offset": 42}]}]}
        sock.sendall(encode_response(api, version, correlation_id, answer))
        peer.done.wait(30)

    async def scenario():
        conn = await BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=10_000).connect()
        try:
            return await conn.request(messages.PRODUCE, body)
        finally:
            await conn.close()

    with Peer(read_then_answer) as peer:
        response = _run(scenario())
    assert response.responses[0].partition_responses[0].base_offset == 42


# ---------------------------------------------------------------------------- correlation ids


def test_an_unknown_correlation_id_resets_the_connection_and_fails_every_request_in_flight():
    def answer_a_stranger(peer: Peer, sock: socket.socket) -> None:
        requests = [peer.read_request(sock) for _ in range(3)]
        api, version = requests[0][0], requests[0][1]
        sock.sendall(encode_response(api, version, 999_999, _metadata_response(version)))
        peer.done.wait(30)

    async def scenario():
        conn = await BrokerConnection("127.0.0.1", peer.port, node_id=3, request_timeout_ms=20_000).connect()
        try:
            futures = [conn.send_nowait(messages.METADATA, {"topics": None}) for _ in range(3)]
            outcomes = await asyncio.gather(*(conn.wait(f, messages.METADATA) for f in futures),
                                            return_exceptions=True)
            return outcomes, conn.connected
        finally:
            await conn.close()

    with Peer(answer_a_stranger) as peer:
        outcomes, connected = _run(scenario(), bound=15)
    assert all(isinstance(o, UnknownCorrelationIdError) for o in outcomes), outcomes
    assert "broker 3 (127.0.0.1:" in str(outcomes[0]) and "correlation id 999999" in str(outcomes[0])
    assert outcomes[0].retriable
    assert not connected


def test_answers_to_acks_0_requests_are_dropped_and_the_connection_kept():
    """tansu answers acks=0 Produce requests (Kafka does not): those answers are dropped, and
    the request behind them gets its own."""

    def answer_everything(peer: Peer, sock: socket.socket) -> None:
        for _ in range(4):
            api, version, correlation_id, _, _ = peer.read_request(sock)
            if api is messages.PRODUCE:
                answer = {"responses": [{"name": "t", "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": correlation_id}]}]}
            else:
                answer = _metadata_response(version)
            sock.sendall(encode_response(api, version, correlation_id, answer))
        peer.done.wait(30)

    async def scenario():
        conn = await BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=20_000).connect()
        try:
            body = {"transactional_id": None, "acks": 0, "timeout_ms": 1000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}]}
            for _ in range(3):
                assert conn.send_nowait(messages.PRODUCE, body, expect_response=False) is None
            metadata = await conn.request(messages.METADATA, {"topics": None})
            return metadata, conn.connected
        finally:
            await conn.close()

    with Peer(answer_everything) as peer:
        metadata, connected = _run(scenario(), bound=15)
    assert metadata.brokers == [] and connected


def test_unanswered_requests_are_forgotten_once_a_later_one_is_answered():
    """Kafka never answers acks=0: what is kept stays one run per stretch between requests that
    are answered, and an answer after a later one's is a stranger. Send numbers past 2**31
    wrap to the same correlation ids."""
    unanswered = _Unanswered()
    base = _CORRELATION_IDS - 5  # correlation ids wrap in the middle
    sent = base
    for _ in range(1000):  # a thousand acks=0 Produce requests, then a Metadata request answered
        for _ in range(50):
            unanswered.add(sent)
            sent += 1
        unanswered.forget_before(sent)  # the request sent `sent`-th was answered
        sent += 1
    assert len(unanswered._runs) == 0
    for _ in range(10):
        unanswered.add(sent)
        sent += 1
    assert len(unanswered._runs) == 1
    third = (sent - 8) & _CORRELATION_IDS
    assert unanswered.answered(third)  # tansu's answer to the third of the ten
    assert not unanswered.answered((sent - 9) & _CORRELATION_IDS)  # before it: never again
    unanswered.add(sent)
    assert not unanswered.answered((sent & _CORRELATION_IDS) - 2**31)  # the same id, negative: a stranger
    assert unanswered.answered(sent & _CORRELATION_IDS)
    assert not unanswered.answered(12345)


# ---------------------------------------------------------------------------- response frame bounds


def test_a_fetch_response_frame_larger_than_the_fetch_asked_for_is_refused_before_it_is_read():
    """A hostile frame header claims 400 MiB in answer to a Fetch of max_bytes 1,000: the request
    fails at once with ResponseTooLargeError naming the sizes, without waiting for (or allocating)
    the frame, and the connection is closed."""
    from raykafka.wire.config import parse_config
    from raykafka.wire.errors import ResponseTooLargeError
    from raykafka.wire.fetch import fetch_body

    def claim_a_huge_frame(peer: Peer, sock: socket.socket) -> None:
        _api, _version, correlation_id, _, _ = peer.read_request(sock)
        sock.sendall(struct.pack(">ii", 400 << 20, correlation_id) + bytes(1000))
        peer.done.wait(30)

    body = fetch_body(parse_config({"bootstrap.servers": "x:1", "fetch.max.bytes": 1000,
                                    "max.partition.fetch.bytes": 1000}), [("t", 0, 0)])

    async def scenario():
        conn = await BrokerConnection("127.0.0.1", peer.port, node_id=5, request_timeout_ms=20_000).connect()
        start = time.monotonic()
        try:
            await conn.request(messages.FETCH, body)
        except ResponseTooLargeError as exc:
            return exc, time.monotonic() - start, conn.connected
        finally:
            await conn.close()
        raise AssertionError("the request succeeded")

    with Peer(claim_a_huge_frame) as peer:
        error, took, connected = _run(scenario(), bound=15)
    assert f"{400 << 20} bytes" in str(error) and str(1000 + (1 << 20)) in str(error)  # RESPONSE_MARGIN, str(error)
    assert "broker 5 (127.0.0.1:" in str(error)
    assert took < 5 and not connected
