"""BrokerWorker: one per broker (Sarama's brokerProducer, which pairs the aggregator and the
flusher). Batches the messages of every partition the broker leads (`AggregatorState`, by
`linger.ms`, `batch.size` and `batch.num.messages`) and sends them to the broker (its
`Flusher`, over `FlusherState`): one process where there were two, an Aggregator actor and the
Flusher actor it called.

Called by the LeaderDispatchers that selected this broker (`add`; each holds a reference, taken
and released through the RetryHandler's broker registry) and by the RetryHandler (`close`, once
the last reference is gone, or at the producer's close). Calls, through its Flusher, the
ProducerResults, the RetryHandler (retries; the worker holds a reference there from its start,
released after its last response) and, in a transactional producer, the TransactionOwner. The
driver asks `metrics_snapshot`.

An async actor (the Flusher awaits the broker), and Ray does not promise that an async actor
starts one caller's calls in the order they were submitted: a call whose arguments are still
being fetched may be overtaken by the next. So each `add` carries its caller's sequence number
(`BrokerWorkerCalls`, on the caller's side, numbers them), and `CallerOrder` takes a caller's
batches in that order. A call's batches enter the `AggregatorState` before anything awaits, and
the sets it makes go to the Flusher in the order they were made; the linger timer, an asyncio
task of the same actor, does the same. So a partition's messages reach the broker in the order
its LeaderDispatcher sent them, and a control message (SYN, FIN) stays in-band.

The compression ratios the Flusher measures go straight to `AggregatorState.observe`, a plain
call in the same process.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from .aggregator import AggregatorState, Entry
from .batch import SHUTDOWN, MessageBatch
from .flusher import Flusher

log = logging.getLogger("raykafka.producer.broker")

# at most this long (s) a lingered set waits for the Flusher to put the previous one on the wire,
# so that more gathers behind it (Nagle)
LINGER_NAGLE_WAIT = 0.05
# the linger timer looks again at least this often (s) with nothing buffered
LINGER_IDLE = 1.0


class CallerOrder:
    """Each caller's calls in the order it numbered them, without Ray: `take` holds a call that
    came before its turn and hands back, in order, every call whose turn has come."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}  # caller -> the sequence number whose turn it is
        self.early: dict[str, dict[int, Any]] = {}  # caller -> calls that came before their turn

    def take(self, caller: str, seq: int, item: Any) -> list[Any]:
        waiting = self.early.setdefault(caller, {})
        waiting[seq] = item
        turn = self.next.get(caller, 0)
        ready = []
        while turn in waiting:
            ready.append(waiting.pop(turn))
            turn += 1
        self.next[caller] = turn
        if not waiting:
            del self.early[caller]
        return ready

    def waiting(self) -> int:
        """Calls held for an earlier one of their caller."""
        return sum(len(calls) for calls in self.early.values())


class BrokerWorker:
    """The actor: an `AggregatorState`, a `Flusher` and the linger timer, on one event loop."""

    def __init__(self, ctx: Any, node_id: int, host: str, port: int):
        config = ctx.config
        self.ctx = ctx
        self.node_id = node_id
        self.path = f"producer/broker/{node_id}"
        self.state = AggregatorState(config["linger.ms"], config["batch.size"], config["batch.num.messages"],
                                     config["max.request.size"])
        self.flusher = Flusher(ctx, node_id, host, port, observe=self.state.observe)
        self.order = CallerOrder()
        self.last: asyncio.Future | None = None  # the last set handed to the Flusher
        self.closing = False
        self._started = False

    def ping(self) -> bool:
        return True

    def metrics_snapshot(self) -> dict[str, Any]:
        return self.flusher.metrics_snapshot()

    async def add(self, caller: str, seq: int, batches: list[MessageBatch]) -> None:
        """A LeaderDispatcher's `seq`-th call: its batches, taken in its order. Returns once the
        sets they completed are on the wire (the caller's window of calls is the backpressure);
        batches left lingering are the worker's to send."""
        self._start()
        turn = asyncio.get_running_loop().create_future()
        for own, own_turn in self.order.take(caller, seq, (batches, turn)):  # no await before this
            own_turn.set_result(self._emit(self.state.add(own, time.monotonic())))
        self.wake.set()
        sent = await turn
        if sent:
            await asyncio.gather(*sent, return_exceptions=True)  # a failed set fails its own batches

    async def close(self) -> None:
        """Flush, shut the Flusher down after its last response (which releases the worker's
        reference on the RetryHandler), then exit."""
        import ray

        self._start()
        self.closing = True
        self.wake.set()
        if self.order.waiting():
            log.warning("%s closing with %d call(s) waiting for an earlier one", self.path, self.order.waiting())
        self._emit(self.state.drain())
        shutdown = self._emit([("control", MessageBatch.control("", -1, SHUTDOWN))])
        await asyncio.gather(*shutdown, return_exceptions=True)
        self.timer.cancel()
        log.info("%s closed", self.path)
        ray.actor.exit_actor()

    # -- utilities ---------------------------------------------------------------

    def _start(self) -> None:
        """The linger timer, on the actor's event loop (there is none yet in `__init__`)."""
        if self._started:
            return
        self._started = True
        self.wake = asyncio.Event()
        self.timer = asyncio.get_running_loop().create_task(self._linger_loop())

    def _emit(self, entries: list[Entry]) -> list[asyncio.Future]:
        """Hand the sets to the Flusher, in order; their futures (done once on the wire)."""
        if not entries:
            return []
        done = self.flusher.submit(entries)
        done.add_done_callback(lambda future: self._on_set_done(future, entries))
        self.last = done
        return [done]

    def _on_set_done(self, future: asyncio.Future, entries: list[Entry]) -> None:
        """A set the Flusher failed to send (a bug there): its batches fail with why."""
        if future.cancelled() or future.exception() is None:
            return
        from .calls import pipeline_error
        from .producer_results import report_failed

        batches = [b for kind, item in entries for b in (item if kind == "produce" else [item])]
        report_failed(self.ctx.results, batches, pipeline_error(future.exception()))

    async def _linger_loop(self) -> None:
        while not self.closing:
            try:
                deadline = self.state.deadline()
                timeout = LINGER_IDLE if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout)
                except TimeoutError:
                    pass
                self.wake.clear()
                last = self.last
                if last is not None and not last.done() and self.state.deadline() is not None:
                    # Nagle: while the Flusher is still sending the previous set, let more gather
                    await asyncio.wait([last], timeout=LINGER_NAGLE_WAIT)
                if not self.closing:
                    self._emit(self.state.poll(time.monotonic()))
            except asyncio.CancelledError:
                raise
            except Exception:  # keep lingering; a set that fails, fails its own batches
                log.exception("%s linger flush failed", self.path)


# ---------------------------------------------------------------------------- the callers' side


class BrokerWorkerCalls:
    """One process's calls to one BrokerWorker, numbered for `CallerOrder`; it stands in for the
    worker's handle where a LeaderDispatcher sends (`add.remote(batches)`). One per process and
    worker (`calls_to`), so that every partition of a LeaderDispatcher on that broker shares one
    sequence, as they shared one caller's order with a synchronous actor."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.caller = uuid.uuid4().hex
        self.seq = 0
        self.add = _NumberedAdd(self)


class _NumberedAdd:
    def __init__(self, calls: BrokerWorkerCalls):
        self.calls = calls

    def remote(self, batches: list[MessageBatch]) -> Any:
        calls = self.calls
        ref = calls.handle.add.remote(calls.caller, calls.seq, batches)
        calls.seq += 1
        return ref


_CALLS: dict[Any, BrokerWorkerCalls] = {}  # worker handle -> this process's calls to it


def calls_to(handle: Any) -> BrokerWorkerCalls:
    """This process's numbered calls to the worker `handle`."""
    calls = _CALLS.get(handle)
    if calls is None:
        calls = _CALLS[handle] = BrokerWorkerCalls(handle)
    return calls


def get_broker_worker(ctx: Any, node_id: int, host: str, port: int) -> tuple[Any, int]:
    """Broker `node_id`'s worker (as this process's numbered calls to it) and its generation,
    one more reference on it (getBrokerProducer)."""
    import ray

    handle, generation = ray.get(ctx.retry_handler.get_broker.remote(node_id, host, port))
    return calls_to(handle), generation
