"""`FaultProxy`: a fault-injecting TCP proxy for Kafka connections, on loopback only.

It listens on 127.0.0.1 and forwards each connection to the broker, frame by frame (Kafka's
4-byte length prefix), on its own asyncio loop in a daemon thread. Faults, each with a
probability and all together bounded by `max_faults`:

- `drop`: after a request frame was forwarded to the broker, close both sides, unanswered
  (the broker may or may not have applied it: the case idempotence exists for);
- `delay`: hold a request frame `delay_s` before forwarding it.

Every fault taken is counted in `faults` (kind -> count), with `connections` and `requests`.
`enabled = False` turns faults off (a clean read-back through the same port).
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from collections import Counter


class FaultProxy:
    def __init__(self, target_port: int, *, drop_rate: float = 0.0, delay_rate: float = 0.0,
                 delay_s: float = 0.1, max_faults: int = 50, seed: int = 0, port: int = 0,
                 spare_first: int = 4):
        self.target_port = target_port
        self.drop_rate, self.delay_rate, self.delay_s = drop_rate, delay_rate, delay_s
        self.max_faults = max_faults
        self.spare_first = spare_first  # the first frames of a connection pass (ApiVersions, auth)
        self.rng = random.Random(seed)
        self.port = port
        self.faults: Counter[str] = Counter()
        self.enabled = True
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)

    @property
    def taken(self) -> int:
        return sum(v for k, v in self.faults.items() if k in ("drop", "delay"))

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _roll(self, kind: str, rate: float) -> bool:
        if not self.enabled or rate <= 0 or self.taken >= self.max_faults:
            return False
        if self.rng.random() < rate:
            self.faults[kind] += 1
            return True
        return False

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.faults["connections"] += 1
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            self.faults["broker_unreachable"] += 1
            client_w.transport.abort()
            return
        self._writers |= {client_w, broker_w}
        back = asyncio.ensure_future(self._pipe(broker_r, client_w))
        frames = 0
        try:
            while True:
                head = await client_r.readexactly(4)
                frame = await client_r.readexactly(struct.unpack(">i", head)[0])
                frames += 1
                self.faults["requests"] += 1
                spare = frames <= self.spare_first
                if not spare and self._roll("delay", self.delay_rate):
                    await asyncio.sleep(self.delay_s)
                broker_w.write(head + frame)
                await broker_w.drain()
                if not spare and self._roll("drop", self.drop_rate):
                    await asyncio.sleep(0.005)  # let the request reach the broker first
                    break
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            back.cancel()
            for w in (client_w, broker_w):
                self._writers.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()
