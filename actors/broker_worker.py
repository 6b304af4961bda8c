"""BrokerWorker: the producer's per-broker stage, Sarama's brokerProducer (which pairs the
aggregator and the flusher). For each broker it hosts, a `BrokerProducer` batches the messages of
every partition the broker leads (`AggregatorState`, by `linger.ms`, `batch.size` and
`batch.num.messages`) and sends them to the broker (its `Flusher`, over `FlusherState`).

One process hosts one broker, or several: a producer starts at most `broker.worker.actors`
workers (by default the node's CPUs); a broker goes to a worker hosting none if one runs, and
one met once that many run to the one hosting the fewest (the RetryHandler's `BrokerRegistry`
decides). A broker costs state, not a process, once the cap is reached or a worker is free.

Called by the LeaderDispatchers that selected a broker it hosts (`add`; each holds a reference,
taken and released through the RetryHandler's broker registry) and by the RetryHandler (`host`
to take one more broker, `close` once a broker's last reference is gone, or at the producer's
close). Calls, through each broker's Flusher, the RetryHandler (retries; each hosted broker
holds a reference there from its start, released after its last response) and, in a
transactional producer, the TransactionOwner. The driver asks `metrics_snapshot`, and
long-polls `poll`: the worker's `Mailbox` (actors/producer_results.py) holds its Flushers'
successes and final errors, and the note of each numbered batch it took (`add` notes them
before any of their bytes go), until the driver takes them, one hop from where they were
decided. The RetryHandler asks `ended_intervals` (which sequence numbers ended here) on a RESET.

A worker stays while the producer is open, hosting brokers or none (the registry places the
next broker on it). At the producer's close, once every broker placed on it has closed, a
worker hands its mailbox over before it exits: the mailbox says it is closed, the worker waits
(up to `request.timeout.ms` + 5 s) for a poll to take what is left (the driver learns of every
worker from the RetryHandler's poll), tells the RetryHandler what ended here
(`worker_closed`), and exits. A worker that dies loses what the driver had not
polled yet: the driver heals (with idempotence the log says what was written) or, for a
transactional producer, its watchdog ends those messages.

An async actor (the Flushers await their brokers), and Ray does not promise that an async actor
starts one caller's calls in the order they were submitted: a call whose arguments are still
being fetched may be overtaken by the next, and the RetryHandler's `host` by a
LeaderDispatcher's first `add`. So each `add` carries its caller's sequence number
(`BrokerWorkerCalls`, on the caller's side, numbers them; both in actors/caller_order.py), and
`CallerOrder` takes a caller's batches in that order; an `add` or `close` for a broker whose
`host` has not run yet waits for it. A call's batches enter the `AggregatorState` before
anything awaits, and the sets it makes go to the Flusher in the order they were made; the linger
timer, an asyncio task of the same actor, does the same. So a partition's messages reach the
broker in the order its LeaderDispatcher sent them, and a control message (SYN, FIN) stays
in-band.

The compression ratios a Flusher measures go straight to its `AggregatorState.observe`, a plain
call in the same process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from ..wire.stats import merge
from .aggregator import AggregatorState
from .batch import SHUTDOWN, Control, Entry, MessageBatch, ProduceSet
from .caller_order import CallerOrder
from .calls import pipeline_error
from .flusher import Flusher
from .producer_results import Mailbox, Reports, report_failed

log = logging.getLogger("raykafka.producer.broker")

# the linger timer looks again at least this often (s) with nothing buffered
LINGER_IDLE = 1.0
# a closing worker's last answer gets this long (s) on its way to the driver before the worker exits
EXIT_GRACE = 0.2
# how often (s) an exiting worker looks whether its other brokers have closed
CLOSE_POLL = 0.02


class BrokerProducer:
    """One broker inside a BrokerWorker: an `AggregatorState`, a `Flusher` and the linger timer,
    on the worker's event loop (made there: `__init__` needs a running loop)."""

    def __init__(self, ctx: Any, node_id: int, host: str, port: int, mailbox: Mailbox | None = None,
                 worker: str | None = None):
        """`mailbox`: the worker's, where the Flusher's outcomes go; `worker`: the worker's name."""
        config = ctx.config
        self.ctx = ctx
        self.node_id = node_id
        self.path = f"producer/broker/{node_id}"
        self.state = AggregatorState(config["linger.ms"], config["batch.size"], config["batch.num.messages"],
                                     config["max.request.size"])
        self.flusher = Flusher(ctx, node_id, host, port, observe=self.state.observe, mailbox=mailbox, worker=worker)
        self.last: asyncio.Future | None = None  # the last set handed to the Flusher
        self.closing = False
        self.wake = asyncio.Event()
        self.timer = asyncio.get_running_loop().create_task(self._linger_loop())

    def add(self, batches: list[MessageBatch]) -> list[asyncio.Future]:
        """The batches into the state; the sets they completed, handed to the Flusher."""
        sent = self._emit(self.state.add(batches, time.monotonic()))
        self.wake.set()
        return sent

    async def close(self) -> None:
        """Flush, then shut the Flusher down after its last response (which releases this
        broker's reference on the RetryHandler)."""
        self.closing = True
        self.wake.set()
        self._emit(self.state.drain())
        await asyncio.gather(*self._emit([Control(MessageBatch.control("", -1, SHUTDOWN))]),
                             return_exceptions=True)
        self.timer.cancel()
        for task in self.flusher.tasks:  # idle for good: the worker may live on for other brokers
            task.cancel()
        log.info("%s closed", self.path)

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
        batches = [b for e in entries for b in (e.batches if isinstance(e, ProduceSet) else [e.batch])]
        report_failed(self.flusher.mailbox.report, batches, pipeline_error(future.exception()))

    async def _wire_free(self) -> None:
        """Wait while the Flusher has not yet put the last set on the wire (its requests in flight
        at `max.in.flight.requests.per.connection`, its connection being made again, or, in a
        transaction, the set's partitions being added): what lingers meanwhile stays here and
        gathers into batches up to `batch.size`, as the Java producer drains a partition only when
        a request can go. Handed on at once, it would queue behind as a set of small batches, a
        request each: a broker slower than the producer's rate then falls further behind with
        every request (and after a failure all of them go round the retry loop)."""
        while (last := self.last) is not None and not last.done() and not self.closing \
                and self.state.deadline() is not None:
            await asyncio.wait([last])

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
                await self._wire_free()
                if not self.closing:
                    self._emit(self.state.poll(time.monotonic()))
            except asyncio.CancelledError:
                raise
            except Exception:  # keep lingering; a set that fails, fails its own batches
                log.exception("%s linger flush failed", self.path)


class BrokerWorker:
    """The actor: the `BrokerProducer` of each broker it hosts, and its callers' order."""

    def __init__(self, ctx: Any, generation: int, node_id: int, host: str, port: int):
        self.ctx = ctx
        self.name = f"{ctx.prefix}broker_worker-{node_id}-{generation}"  # as the RetryHandler named it
        self.first: tuple | None = (generation, node_id, host, port)  # hosted once the event loop runs
        # by the registry's generation, one per broker placed here (a broker closed and placed
        # here again is another generation, whatever order the calls run in)
        self.brokers: dict[int, BrokerProducer] = {}
        self.hosting: dict[int, asyncio.Future] = {}  # brokers asked for before their `host` ran
        self.orders: dict[int, CallerOrder] = {}  # by generation: each broker's callers, in their order
        self.news: asyncio.Event | None = None  # set on the event loop when the mailbox has news
        self.mailbox = Mailbox(self._wake, notes=ctx.config["transactional.id"] is None)  # notes: for a heal
        self.handed_over: asyncio.Event | None = None  # a poll took the closed mailbox

    def ping(self) -> bool:
        return True

    async def poll(self, timeout: float) -> Reports:
        """What ended here, and the notes taken, since the last poll; waits up to `timeout` s for
        the first entry. `Reports.closed`: the worker exits, nothing more comes from it."""
        self._events()
        if not self.mailbox.has_news and timeout > 0:
            self.news.clear()
            try:
                await asyncio.wait_for(self.news.wait(), timeout)
            except TimeoutError:
                pass
        reports = self.mailbox.take()
        if reports.closed:
            self.handed_over.set()
        return reports

    def ended_intervals(self) -> list[Any]:
        """The sequence numbers that ended here (the RetryHandler's `first_unresolved` merges them)."""
        return self.mailbox.ended_intervals()

    def metrics_snapshot(self) -> dict[str, Any]:
        return merge(broker.flusher.metrics_snapshot() for broker in self.brokers.values())

    async def host(self, generation: int, node_id: int, host: str, port: int) -> None:
        """Take one more broker, `generation` of the RetryHandler's registry, which placed it here."""
        self._host_first()
        self._host(generation, node_id, host, port)

    async def add(self, generation: int, caller: str, seq: int, batches: list[MessageBatch]) -> None:
        """A LeaderDispatcher's `seq`-th call to broker `generation`: its batches, taken in its
        order. Returns once the sets they completed are on the wire (the caller's window of calls
        counts the calls out; a partition whose window is full keeps its batches in the
        LeaderDispatcher); batches left lingering are the worker's to send."""
        broker = await self._broker(generation)
        turn = asyncio.get_running_loop().create_future()
        for own, own_turn in self.orders[generation].take(caller, seq, (batches, turn)):  # no await before this
            self.mailbox.noted(own)  # before any of their bytes can reach the broker
            own_turn.set_result(broker.add(own))
        sent = await turn
        if sent:
            await asyncio.gather(*sent, return_exceptions=True)  # a failed set fails its own batches

    async def close(self, generation: int | None, last: bool) -> None:
        """Close broker `generation` (None: no broker, the worker hosts none): flush, shut its
        Flusher down after its last response; then, if the producer is closing and this was the
        `last` broker here, wait (up to `request.timeout.ms` + 5 s) until every broker placed here has
        closed, whatever order Ray started the calls in, and exit."""
        try:
            if generation is not None:
                await self._close_broker(generation)
        finally:
            if last:
                await self._closed_all(self.ctx.timeout)
                await self._hand_over()
                ray.actor.exit_actor()

    async def _close_broker(self, generation: int) -> None:
        broker = await self._broker(generation)
        order = self.orders.pop(generation)
        if order.waiting():
            log.warning("%s closing with %d call(s) waiting for an earlier one", broker.path, order.waiting())
        try:
            await broker.close()
        except Exception:
            log.exception("%s: close failed", broker.path)
            raise
        finally:
            del self.brokers[generation]

    async def _closed_all(self, timeout: float) -> None:
        """Wait, up to `timeout` s, until no broker is hosted here or about to be."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.brokers or self.hosting:
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("%s: exiting with %d broker(s) not closed", self.name, len(self.brokers) + len(self.hosting))
                return
            await asyncio.sleep(CLOSE_POLL)

    async def _hand_over(self) -> None:
        """Before the worker exits: the mailbox closed and taken by a poll (bounded), and what
        ended here told to the RetryHandler."""
        self._events()
        self.mailbox.close()
        try:
            await asyncio.wait_for(self.handed_over.wait(), self.ctx.timeout)
        except TimeoutError:
            log.warning("%s: closing with %d outcome(s) nobody polled", self.name, len(self.mailbox.entries))
        try:
            await self.ctx.retry_handler.worker_closed.remote(self.name, self.mailbox.ended_intervals())
        except Exception as exc:  # the RetryHandler is gone: the producer is closing
            log.info("%s: the retry handler was not told of the close: %s", self.name, exc)
        await asyncio.sleep(EXIT_GRACE)

    # -- utilities ---------------------------------------------------------------

    def _host_first(self) -> None:
        """The broker the worker was started for, on the actor's event loop (there is none in `__init__`)."""
        if self.first is not None:
            first, self.first = self.first, None
            self._host(*first)

    def _events(self) -> None:
        """The mailbox's events, on the actor's event loop (there is none in `__init__`)."""
        if self.news is None:
            self.news, self.handed_over = asyncio.Event(), asyncio.Event()

    def _wake(self) -> None:
        if self.news is not None:
            self.news.set()

    def _host(self, generation: int, node_id: int, host: str, port: int) -> None:
        self.brokers[generation] = BrokerProducer(self.ctx, node_id, host, port, self.mailbox, self.name)
        self.orders[generation] = CallerOrder()
        log.info("producer/broker/%d hosted (generation %d, %d broker(s) here)", node_id, generation,
                 len(self.brokers))
        waiting = self.hosting.pop(generation, None)
        if waiting is not None:
            waiting.set_result(None)

    async def _broker(self, generation: int) -> BrokerProducer:
        """Broker `generation`'s part, once `host` has run for it."""
        self._host_first()
        broker = self.brokers.get(generation)
        if broker is None:
            waiting = self.hosting.get(generation)
            if waiting is None:
                waiting = self.hosting[generation] = asyncio.get_running_loop().create_future()
            await waiting
            broker = self.brokers[generation]
        return broker
