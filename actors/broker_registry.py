"""`BrokerRegistry`: the producer's broker workers and who holds them (Sarama's
getBrokerProducer / unrefBrokerProducer), without Ray.

One per producer, inside the RetryHandler actor, which serialises its calls as Sarama's mutex
does. A broker's worker (its BrokerWorker: the aggregator and the flusher) is started on the first
reference, or ahead of it (`prestart`), and handed back to be closed when the last
LeaderDispatcher using it lets go, or at close (`release_all`: one nobody took, or one whose
holder died). A generation number tells a late `unref` for a worker already replaced from one
for the current worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

StartWorker = Callable[[int, str, int, int], Any]  # (node id, host, port, generation) -> worker handle


@dataclass
class BrokerWorker:
    handle: Any  # the broker's BrokerWorker actor
    generation: int
    refs: int = 0  # LeaderDispatchers holding it


class BrokerRegistry:
    def __init__(self, start: StartWorker):
        self.start = start
        self.workers: dict[int, BrokerWorker] = {}  # node id -> its worker
        self.generation = 0
        self.released = False  # closing: no worker starts any more

    def get(self, node_id: int, host: str, port: int) -> tuple[Any, int]:
        """Broker `node_id`'s worker and its generation, with one more reference on it."""
        worker = self.workers.get(node_id) or self._start(node_id, host, port)
        worker.refs += 1
        return worker.handle, worker.generation

    def prestart(self, node_id: int, host: str, port: int) -> bool:
        """Start broker `node_id`'s worker with no reference yet; False if there is one, or closing."""
        if node_id in self.workers or self.released:
            return False
        self._start(node_id, host, port)
        return True

    def unref(self, node_id: int, generation: int) -> Any | None:
        """One reference less; the worker's handle if that was the last one (to close), else None."""
        worker = self.workers.get(node_id)
        if worker is None or worker.generation != generation:
            return None  # a worker already closed or replaced
        worker.refs -= 1
        if worker.refs > 0:
            return None
        del self.workers[node_id]
        return worker.handle

    def release_all(self) -> list[Any]:
        """Closing: every worker still open (to close), and no more starts."""
        self.released = True
        handles = [worker.handle for worker in self.workers.values()]
        self.workers.clear()
        return handles

    def _start(self, node_id: int, host: str, port: int) -> BrokerWorker:
        self.generation += 1
        worker = self.workers[node_id] = BrokerWorker(self.start(node_id, host, port, self.generation), self.generation)
        return worker
