"""`CallWindow`: at most N calls in flight from one stage to the next (backpressure).

Ray's actor queues are unbounded; a stage that submits a call per batch would let a fast
producer pile up work downstream without limit. A window blocks the caller on the oldest call
once N are outstanding, which also surfaces a downstream failure at the caller.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class CallWindow:
    def __init__(self, limit: int):
        self.limit = limit
        self._refs: deque[Any] = deque()

    def __len__(self) -> int:
        return len(self._refs)

    def submit(self, ref: Any) -> list[Any]:
        """Add a call; the results of the oldest ones, once more than N are outstanding (waited for)."""
        import ray

        self._refs.append(ref)
        out = []
        while len(self._refs) > self.limit:
            out.append(ray.get(self._refs.popleft()))
        return out

    def finished(self) -> list[Any]:
        """The results of the oldest calls that have returned already, without waiting. A call
        that failed stays in the window, for `submit` or `drain` to raise as they always do."""
        import ray

        out = []
        while self._refs and ray.wait([self._refs[0]], timeout=0)[0]:
            try:
                out.append(ray.get(self._refs[0]))
            except Exception:
                break
            self._refs.popleft()
        return out

    def drain(self, timeout: float | None = None) -> None:
        import ray

        refs, self._refs = list(self._refs), deque()
        if refs:
            ray.get(refs, timeout=timeout)
