"""One mock broker (`MockBroker`): a real TCP server on 127.0.0.1 with a kernel-chosen port, on
its own asyncio loop in a daemon thread, serving one request at a time per connection, in order.

A request is read and logged, then, in this order: a scheduled drop closes the connection (the
request applied or not, as asked); a handler answers it (the broker's scripted one, else the
cluster's scripted one, else the cluster's default); a scheduled delay holds the answer; the
answer is written. A request with no handler gets no answer, so a test fails loudly. The
handlers, the state and the fault rules are the `MockCluster`'s (`cluster.py`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ..wire import messages
from ..wire.errors import DecodeError
from ..wire.protocol import Api, Struct, decode_request, encode_response
from .protocol_codes import UNSUPPORTED_VERSION, key_of

log = logging.getLogger("raykafka.mock")

T = TypeVar("T")

Handler = Callable[[int, Struct, "MockBroker"], Any]
"""(version, request body, broker) -> response dict, None for no answer, or an awaitable of either."""

_I32 = struct.Struct(">i")


class ServedCluster(Protocol):
    """What a `MockBroker` takes from the `MockCluster` it serves (`cluster.py`): the lock over
    the shared state, the request log and the condition told of each arrival, the scripted and
    default handlers, the faults scheduled for a request, and the list of handler failures."""

    lock: threading.RLock
    handlers: dict[int, Handler]
    default_handlers: dict[int, Handler]
    handler_errors: list[str]
    _log: list[tuple[int, int, int, Struct]]
    _arrived: threading.Condition

    def _api_versions_body(self, error_code: int = 0) -> dict[str, Any]: ...

    def _take_drop(self, api_key: int, node_id: int) -> Any: ...

    def _delay_for(self, api_key: int, node_id: int) -> float: ...


class MockBroker:
    """One mock broker: a TCP listener on 127.0.0.1 and the loop thread that serves it."""

    def __init__(self, node_id: int, cluster: ServedCluster, port: int = 0):
        self.node_id = node_id
        self.cluster = cluster
        self.port = port
        self.handlers: dict[int, Handler] = {}
        self._log: list[tuple[int, int, Struct]] = []  # (api key, version, body), in arrival order
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.changed = asyncio.Event()  # set, then replaced, when any log grows or a leader moves
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name=f"mock-broker-{node_id}", daemon=True)
        self._thread.start()
        self.start()

    def __repr__(self) -> str:
        return f"MockBroker({self.node_id}, {self.address})"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def requests(self, api_key: Api | int) -> list[Struct]:
        """The decoded bodies of the requests of this kind this broker received, in order."""
        key = key_of(api_key)
        with self.cluster.lock:
            return [body for k, _v, body in self._log if k == key]

    def request_versions(self, api_key: Api | int) -> list[int]:
        key = key_of(api_key)
        with self.cluster.lock:
            return [v for k, v, _body in self._log if k == key]

    def set_handler(self, api_key: Api | int, fn: Handler | None) -> None:
        """Script this broker's answers to one kind of request (None: back to the cluster's)."""
        with self.cluster.lock:
            if fn is None:
                self.handlers.pop(key_of(api_key), None)
            else:
                self.handlers[key_of(api_key)] = fn

    def wake(self) -> None:
        """On this broker's loop: release the Fetches waiting for a change."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Listen (again) on this broker's port; the first start lets the kernel choose it."""
        if not self.running:
            self._call(self._start())

    def stop(self) -> None:
        """Close the listener and every open connection; state and port are kept for `start`."""
        if self.running:
            self._call(self._stop())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:  # from a handler: cannot wait for ourselves
            self.loop.create_task(coro)
            return None  # type: ignore[return-value]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    # -- serving -----------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if not await self._handle_frame(frame, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("mock broker %d: serving a connection failed", self.node_id)
            self.cluster.handler_errors.append(f"broker {self.node_id}: connection failed")
        finally:
            self._connections.discard(task)
            self._writers.discard(writer)
            writer.transport.abort()

    async def _handle_frame(self, frame: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False closes the connection."""
        cluster = self.cluster
        key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        api = messages.APIS.get(key)
        if api is not None and key == messages.API_VERSIONS.key and version not in api.request.versions:
            # a version we do not know: answer in v0 with what we speak, as Kafka does
            self._record(key, version, Struct())
            writer.write(encode_response(api, 0, correlation_id, cluster._api_versions_body(UNSUPPORTED_VERSION)))
            return True
        try:
            api, version, correlation_id, _client_id, body = decode_request(frame, messages.APIS)
        except DecodeError as exc:
            log.warning("mock broker %d: undecodable request (%s); closing the connection", self.node_id, exc)
            cluster.handler_errors.append(f"broker {self.node_id}: undecodable request: {exc}")
            return False
        self._record(api.key, version, body)

        drop = cluster._take_drop(api.key, self.node_id)
        if drop is not None and not drop.apply:
            return False
        handler = self._handler_for(api.key)
        if handler is None:
            log.warning("mock broker %d: no handler for %s v%d; not answering", self.node_id, api.name, version)
            return True
        try:
            response = handler(version, body, self)
            if inspect.isawaitable(response):
                response = await response
        except Exception as exc:
            log.exception("mock broker %d: handler for %s failed", self.node_id, api.name)
            cluster.handler_errors.append(f"broker {self.node_id}: {api.name} handler failed: {exc!r}")
            return False
        if drop is not None:
            return False  # applied, never answered
        if response is None:
            return True
        seconds = cluster._delay_for(api.key, self.node_id)
        if seconds > 0:
            await asyncio.sleep(seconds)
        try:
            out = encode_response(api, version, correlation_id, response)
        except (TypeError, ValueError) as exc:
            log.error("mock broker %d: cannot encode the %s v%d response: %s", self.node_id, api.name, version, exc)
            cluster.handler_errors.append(f"broker {self.node_id}: bad {api.name} response: {exc}")
            return False
        writer.write(out)
        await writer.drain()
        return True

    def _record(self, key: int, version: int, body: Struct) -> None:
        with self.cluster.lock:
            self._log.append((key, version, body))
            self.cluster._log.append((self.node_id, key, version, body))
            self.cluster._arrived.notify_all()

    def _handler_for(self, key: int) -> Handler | None:
        with self.cluster.lock:
            return self.handlers.get(key) or self.cluster.handlers.get(key) or self.cluster.default_handlers.get(key)
