"""`BrokerRegistry`: the producer's broker workers, which broker each hosts and who holds them
(Sarama's getBrokerProducer / unrefBrokerProducer), without Ray.

One per producer, inside the RetryHandler actor, which serialises its calls as Sarama's mutex
does. A broker is placed on the first reference, or ahead of it (`prestart`): on a worker that
hosts no broker if one runs, else on a new worker process while fewer than `max_workers` run,
else on the running worker hosting the fewest brokers. Each placement is a generation (a number
no other placement shares), by which the worker tells its brokers apart and a late `unref` for a
broker already closed is told from one for the current placement. When the last LeaderDispatcher
using a broker lets go (Sarama closes its brokerProducer on an error, so every retry of a
partition led by a broker nobody else uses does this), the broker is handed back to be closed on
its worker, and the worker stays, hosting nothing, for the next placement: a goroutine in
Sarama, a broker placed again costs state here, not a process. A running worker is asked
whether it is alive before a broker is placed on it (`alive`): one that died (killed, or its node
lost) is forgotten, and the broker goes to another, or to a new process. At close
(`release_all`) every broker still open (one nobody took, or one whose holder died) is closed,
and every worker exits after its last (`Closing.last`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

StartWorker = Callable[[int, int, str, int], Any]  # (generation, node id, host, port) -> a new worker hosting it
HostBroker = Callable[[Any, int, int, str, int], None]  # (worker, generation, node id, host, port): one more there
Alive = Callable[[Any], bool]  # (worker): whether it still answers
NO_BROKER = None  # a `Closing`'s generation for a worker that hosts none: it only exits


@dataclass
class WorkerProcess:
    handle: Any  # the BrokerWorker actor
    generations: set[int] = field(default_factory=set)  # the brokers placed on it, still open


@dataclass
class PlacedBroker:
    worker: WorkerProcess
    generation: int
    refs: int = 0  # LeaderDispatchers holding it


class RetryWriters:
    """Who may still call the RetryHandler's `retry`: the driver until it closes, and each broker
    placed on a worker until its last response is handled. A dead worker's brokers never let go,
    and a worker may host several brokers, or none any more: so a close that waits for the
    brokers counts those on the living workers (`held`), not the dead workers."""

    def __init__(self) -> None:
        self.total = 0
        self.on: Counter[str] = Counter()  # worker name -> the references of the brokers it hosts

    def add(self, worker: str | None = None) -> None:
        """The driver's reference (no `worker`), or that of a broker placed on `worker`."""
        self.total += 1
        if worker is not None:
            self.on[worker] += 1

    def drop(self, worker: str | None = None) -> None:
        self.total -= 1
        if worker is not None:
            self.on[worker] -= 1

    def held(self, dead: Iterable[str] = ()) -> int:
        """The references still held, less those on the `dead` workers."""
        return self.total - sum(self.on[name] for name in set(dead))


class Closing(NamedTuple):
    """A broker to close on its worker (`handle.close.remote(generation, last)`)."""

    handle: Any
    generation: int | None  # NO_BROKER: the worker hosts none, it only exits
    last: bool  # the producer is closing and this is the worker's last broker: the worker exits after it


class BrokerRegistry:
    def __init__(self, start: StartWorker, host: HostBroker, alive: Alive, max_workers: int = 0):
        """`max_workers`: how many worker processes may run at once (0: no cap, a worker per broker open at once)."""
        self.start = start
        self.host = host
        self.alive = alive
        self.max_workers = max_workers
        self.brokers: dict[int, PlacedBroker] = {}  # node id -> where it is placed
        self.workers: list[WorkerProcess] = []  # the worker processes running, hosting brokers or none
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
        """Closing: every broker still open (to close) and every worker (to exit), and no more starts."""
        self.released = True
        idle = [w for w in self.workers if not w.generations]
        out = [self._closing(broker) for broker in self.brokers.values()]
        out += [Closing(w.handle, NO_BROKER, last=True) for w in idle]
        self.brokers.clear()
        self.workers.clear()
        return out

    def _running_worker(self) -> WorkerProcess | None:
        """The running worker to place the next broker on: one hosting none (a process to spare),
        else, once as many run as may, the one hosting the fewest; None: start one. A worker that
        no longer answers is forgotten (the brokers it hosted close when their holders let go)."""
        while True:
            idle = next((w for w in self.workers if not w.generations), None)
            if idle is None and not 0 < self.max_workers <= len(self.workers):
                return None
            worker = idle or min(self.workers, key=lambda w: len(w.generations))
            if self.alive(worker.handle):
                return worker
            self.workers.remove(worker)

    def _closing(self, broker: PlacedBroker) -> Closing:
        worker = broker.worker
        worker.generations.discard(broker.generation)
        return Closing(worker.handle, broker.generation, last=self.released and not worker.generations)

    def _place(self, node_id: int, host: str, port: int) -> PlacedBroker:
        self.generation += 1
        worker = self._running_worker()
        if worker is not None:
            self.host(worker.handle, self.generation, node_id, host, port)
        else:
            worker = WorkerProcess(self.start(self.generation, node_id, host, port))
            self.workers.append(worker)
        worker.generations.add(self.generation)
        broker = self.brokers[node_id] = PlacedBroker(worker, self.generation)
        return broker
