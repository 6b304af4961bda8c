"""`BrokerRegistry`: the producer's broker workers, which broker each hosts and who holds them
(Sarama's getBrokerProducer / unrefBrokerProducer), without Ray.

One per producer, inside the RetryHandler actor, which serialises its calls as Sarama's mutex
does. A broker is placed on the first reference, or ahead of it (`prestart`): on a new worker
process while fewer than `max_workers` run, else on the running worker hosting the fewest
brokers. Each placement is a generation (a number no other placement shares), by which the
worker tells its brokers apart and a late `unref` for a broker already closed is told from one
for the current placement. When the last LeaderDispatcher using a broker lets go, or at close
(`release_all`: a broker nobody took, or one whose holder died), the broker is handed back to
be closed on its worker; the worker's last broker closes it too (`Closing.last`), and a worker
about to close is given no new broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

StartWorker = Callable[[int, int, str, int], Any]  # (generation, node id, host, port) -> a new worker hosting it
HostBroker = Callable[[Any, int, int, str, int], None]  # (worker, generation, node id, host, port): one more there


@dataclass
class WorkerProcess:
    handle: Any  # the BrokerWorker actor
    generations: set[int] = field(default_factory=set)  # the brokers placed on it, still open


@dataclass
class PlacedBroker:
    worker: WorkerProcess
    generation: int
    refs: int = 0  # LeaderDispatchers holding it


class Closing(NamedTuple):
    """A broker to close on its worker (`handle.close.remote(generation, last)`)."""

    handle: Any
    generation: int
    last: bool  # the worker's last broker: the worker exits after it


class BrokerRegistry:
    def __init__(self, start: StartWorker, host: HostBroker | None = None, max_workers: int = 0):
        """`max_workers`: how many worker processes may run at once (0: one per broker)."""
        self.start = start
        self.host = host
        self.max_workers = max_workers
        self.brokers: dict[int, PlacedBroker] = {}  # node id -> where it is placed
        self.workers: list[WorkerProcess] = []  # the worker processes that may take brokers
        self.generation = 0
        self.released = False  # closing: no worker starts any more

    def get(self, node_id: int, host: str, port: int) -> tuple[Any, int]:
        """Broker `node_id`'s worker and the broker's generation, with one more reference on it."""
        broker = self.brokers.get(node_id) or self._place(node_id, host, port)
        broker.refs += 1
        return broker.worker.handle, broker.generation

    def prestart(self, node_id: int, host: str, port: int) -> bool:
        """Place broker `node_id` with no reference yet; False if it is placed, or closing."""
        if node_id in self.brokers or self.released:
            return False
        self._place(node_id, host, port)
        return True

    def unref(self, node_id: int, generation: int) -> Closing | None:
        """One reference less; what to close if that was the last one, else None."""
        broker = self.brokers.get(node_id)
        if broker is None or broker.generation != generation:
            return None  # a broker already closed or placed anew
        broker.refs -= 1
        if broker.refs > 0:
            return None
        del self.brokers[node_id]
        return self._closing(broker)

    def release_all(self) -> list[Closing]:
        """Closing: every broker still open (to close), and no more starts."""
        self.released = True
        out = [self._closing(broker) for broker in self.brokers.values()]
        self.brokers.clear()
        return out

    def _closing(self, broker: PlacedBroker) -> Closing:
        worker = broker.worker
        worker.generations.discard(broker.generation)
        last = not worker.generations
        if last:  # about to exit: no broker is placed there any more
            self.workers.remove(worker)
        return Closing(worker.handle, broker.generation, last)

    def _place(self, node_id: int, host: str, port: int) -> PlacedBroker:
        self.generation += 1
        if self.host is not None and 0 < self.max_workers <= len(self.workers):  # as many as may run
            worker = min(self.workers, key=lambda w: len(w.generations))
            self.host(worker.handle, self.generation, node_id, host, port)
        else:
            worker = WorkerProcess(self.start(self.generation, node_id, host, port))
            self.workers.append(worker)
        worker.generations.add(self.generation)
        broker = self.brokers[node_id] = PlacedBroker(worker, self.generation)
        return broker
