"""An asyncio loop on a background thread, for callers that are not async themselves.

The wire layer is asyncio throughout; a driver program (and `Admin`) is usually plain
synchronous Python. `LoopThread.run` hands a coroutine to the loop and waits for it.
`wait_or` is the pause a loop on it takes that ends early when told to.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "raykafka-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and return its result (raising what it raised)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()


async def wait_or(event: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `event` is set meanwhile."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        pass
