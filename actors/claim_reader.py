"""ClaimReader: a group member's claims from their committed offsets to their handler threads.

Cardinality: one per `MemberRuntime` (`actors/group_member_state.py`), which makes it and calls
it for each session: `open_claims` (a `Claim` per partition a generation gives the member, at its
committed offset), `start_claim` (the handler's `consume_claim` of one claim, in a thread of its
own) and `fetch_loop` (until the session ends). Calls: the group coordinator for the committed
offsets (through `wire.group_coordinator`), the leaders of the claimed partitions (one Fetch
round per broker for all the claims, `wire.fetch_round`), each claim's queue (`Claim.put`,
`fail`, in `actors/group_session.py`), the user's `consume_claim`, and back to its member
through `ReaderOwner`: a partition failed, a handler failed, a fatal error. No Ray here.

Order kept: per claim, batches reach the handler in offset order. A claim whose handler is
slow pauses alone: it is left out of fetches while its queue is full, or while a batch has
waited in it longer than `max.processing.time.ms`, until the handler takes a batch (as a
`Consumer`'s broker consumer leaves out a partition that has not acked within that time).
The member fetches its claims itself rather than through per-partition actors: claims
change at every rebalance, and a member is already one process.

A partition whose data cannot be read (a corrupt batch; an offset out of range with
`auto.offset.reset=none`; no committed offset and no reset policy) fails alone: its claim ends
with a `ConsumerError` naming it and the cause, logged at ERROR; the other claims go on. Any
other failure of a fetch (a broker down, a leader moved) is retried after `retry.backoff.ms`
with fresh metadata, for as long as the session runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..wire.cluster import Cluster
from ..wire.errors import ConsumerError, KafkaError, is_fatal
from ..wire.fetch import RESET_POLICIES, resolve_offsets
from ..wire.fetch_round import FetchAnswer, back_off, fetch_round
from ..wire.fetcher import Data, Failed, PartitionFetch, Reset, Retry, bad_data
from ..wire.group_coordinator import GroupCoordinator, RebalanceNeeded
from ..wire.loop import wait_or
from ..wire.serde import Deserializers
from .group_session import Claim, Session
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.group_member")

IDLE_CHECK_S = 0.02  # with every claim paused or done, how often the fetch loop looks again


class ReaderOwner(Protocol):
    """What a `ClaimReader` takes from the member it reads for (`MemberRuntime`): its config,
    cluster, coordinator, metrics, handler and deserializers, the topics it subscribes to now,
    the count of batches fetched (its status reports it), and where failures go."""

    config: dict[str, Any]
    cluster: Cluster
    coordinator: GroupCoordinator
    metrics: ConsumerMetrics
    handler: Any
    deserialize: Deserializers
    topics: list[str]
    fetched_batches: int

    def _record(self, kind: str, where: str, cause: str) -> None: ...

    def _fail_member(self, error: BaseException) -> None: ...

    def _handler_failed(self, where: str, exc: BaseException) -> None: ...


class ClaimReader:
    """Opens a member's claims, fetches them, and runs the handler on each in its own thread."""

    def __init__(self, owner: ReaderOwner):
        self.owner = owner

    # -- opening ---------------------------------------------------------------

    async def _retrying(self, call: Callable[[], Awaitable[Any]], what: str, over: asyncio.Event,
                        end: Callable[[str], None]) -> Any:
        """`call()`'s result, retried on retriable failures until the session ends (then None)."""
        failures = 0
        while not over.is_set():
            try:
                return await call()
            except RebalanceNeeded as exc:
                end(f"rebalance ({exc})")
                return None
            except KafkaError as exc:
                if is_fatal(exc):
                    raise
                failures += 1
                log.log(logging.WARNING if failures == 1 else logging.INFO, "group/%s %s failed (%d): %s",
                        self.owner.coordinator.group_id, what, failures, exc)
            await back_off(self.owner.config, over)
        return None

    async def open_claims(self, wanted: dict[str, list[int]], over: asyncio.Event,
                          end: Callable[[str], None]) -> dict[tuple[str, int], Claim] | None:
        """A claim per partition `wanted`, at its committed offset, else where `auto.offset.reset`
        says; a partition with neither fails alone. None if the session ended first (or, for a
        cooperative session's new partitions, a rebalance came first: `end` was told)."""
        owner = self.owner
        try:
            committed = await self._retrying(lambda: owner.coordinator.fetch_offsets(wanted), "offset fetch", over, end)
            if committed is None:
                return None
            policy = owner.config["auto.offset.reset"]
            claims = {}
            for topic, ps in wanted.items():
                missing = [p for p in ps if committed.get((topic, p), -1) < 0]
                reset: dict[int, int] = {}
                if missing and policy in RESET_POLICIES:
                    reset = await self._retrying(lambda t=topic, m=missing: resolve_offsets(owner.cluster, t, m, policy),
                                                 f"{topic} offset reset", over, end)
                    if reset is None:
                        return None
                for p in ps:
                    start = reset.get(p, committed.get((topic, p), -1))
                    claim = claims[(topic, p)] = Claim(topic, p, start, None if owner.deserialize.raw else owner.deserialize)
                    if start < 0:
                        self.partition_failed(claim, f"no committed offset and auto.offset.reset={policy}")
            return claims
        except KafkaError as exc:  # fatal (the retries took the rest)
            owner._fail_member(exc)
            return None

    def partition_failed(self, claim: Claim, cause: str) -> None:
        where = f"{claim.topic}/{claim.partition}"
        error = ConsumerError(f"{where}: {cause}")
        log.error("group/%s %s failed: %s", self.owner.coordinator.group_id, where, cause)
        claim.fail(error)
        self.owner._record("partition", where, str(error))

    # -- the handler's threads ---------------------------------------------------

    def start_claim(self, session: Session, claim: Claim, end: Callable[[str], None]) -> threading.Thread:
        """The handler's `consume_claim` of `claim`, in a thread of its own, started."""
        thread = threading.Thread(target=self._consume_claim, args=(session, claim, asyncio.get_running_loop(), end),
                                  daemon=True, name=f"claim-{claim.topic}-{claim.partition}")
        thread.start()
        return thread

    def _consume_claim(self, session: Session, claim: Claim, loop: asyncio.AbstractEventLoop,
                       end: Callable[[str], None]) -> None:
        """Run the handler on one claim; as in Sarama, the first claim to stop ends the session
        (not one that stopped because its partition failed)."""
        why = f"consume_claim({claim.topic}/{claim.partition}) returned"
        try:
            self.owner.handler.consume_claim(session, claim)
        except Exception as exc:  # noqa: BLE001 - the handler's error: recorded, the policy decides
            _call_soon(loop, self.owner._handler_failed, f"consume_claim({claim.topic}/{claim.partition})", exc)
            why = f"consume_claim({claim.topic}/{claim.partition}) raised {type(exc).__name__}: {exc}"
        else:
            if claim.error is not None:
                return
        if not claim._closed.is_set():
            _call_soon(loop, end, why)

    # -- fetching --------------------------------------------------------------

    async def fetch_loop(self, claims: dict[tuple[str, int], Claim], positions: dict[tuple[str, int], PartitionFetch],
                         over: asyncio.Event) -> None:
        """Fetch every claim that is neither done, full nor behind (a batch left untaken past
        `max.processing.time.ms`), one request per leader. A failure
        that is not the partition's own (a broker down, a leader moved) is retried after
        `retry.backoff.ms` with fresh metadata; reconnecting waits the reconnect backoff."""
        owner = self.owner
        stale = True
        failures = 0
        max_processing = owner.config["max.processing.time.ms"] / 1000
        while not over.is_set():
            now = time.monotonic()
            wanted = [tp for tp, claim in claims.items()
                      if not claim.done and not claim.full and not claim.behind(now, max_processing)]
            if not wanted:
                await wait_or(over, IDLE_CHECK_S)  # every claim is done or paused: their handlers are behind
                continue
            problems: list[Any] = []
            try:
                if stale:
                    await owner.cluster.refresh_metadata(owner.topics)
                    stale = False
                by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
                for tp in wanted:
                    by_leader[owner.cluster.metadata.leader(*tp)].append(tp)
                results = await asyncio.gather(*(self._fetch_from(leader, tps, claims, positions)
                                                 for leader, tps in by_leader.items()), return_exceptions=True)
                problems = [r for r in results if r is not None]
            except KafkaError as exc:
                problems = [exc]
            for problem in problems:
                if isinstance(problem, BaseException) and (is_fatal(problem) or not isinstance(problem, KafkaError)):
                    raise problem
            if problems:
                failures += 1
                stale = True
                log.log(logging.WARNING if failures in (1, 10, 100) else logging.INFO,
                        "group/%s fetch failed %d time(s) in a row, retrying with fresh metadata: %s",
                        owner.coordinator.group_id, failures, "; ".join(map(str, problems)))
                await back_off(owner.config, over)
            else:
                failures = 0

    async def _fetch_from(self, leader: int, tps: list[tuple[str, int]], claims: dict[tuple[str, int], Claim],
                          positions: dict[tuple[str, int], PartitionFetch]) -> Any:
        """One Fetch from `leader`; None if it went well, else what went wrong (to retry).
        A partition whose own data is bad fails its claim here and is not retried."""
        if leader < 0:
            return f"no leader for {tps}"
        owner = self.owner
        conn = await owner.cluster.connection(leader)
        asked = {tp: positions[tp] for tp in tps if tp in positions}  # a cooperative rejoin may have revoked some
        if not asked:
            return None
        answer = await fetch_round(conn, owner.config, asked,
                                   timed=lambda request: owner.metrics.fetch_timed(leader, request),
                                   where=f"broker {leader}")
        problem = None
        for tp, fetch, outcome in answer.parts:
            claim = claims.get(tp)
            if claim is None or claim.done or positions.get(tp) is not fetch:
                continue  # revoked meanwhile, or claimed again since (a new fetch, at its own offset)
            claim.high_watermark = fetch.high_watermark
            if isinstance(outcome, Data):
                self._take(claim, fetch, outcome, answer)
            elif isinstance(outcome, Reset):
                problem = await self._offset_out_of_range(claim, fetch, outcome) or problem
            elif isinstance(outcome, Retry):
                problem = str(outcome.error)
            elif isinstance(outcome, Failed):
                self.partition_failed(claim, str(outcome.error))
            # Refetch: the next round asks again, for the whole batch
            claim.fetched_to = fetch.offset  # for the lag the member reports
        return problem

    def _take(self, claim: Claim, fetch: PartitionFetch, data: Data, answer: FetchAnswer) -> None:
        """A partition's fetched records into its claim's queue, or its claim failed if they cannot
        be read; they may inflate to what is left of the `answer`'s budget, which every partition
        of the answer draws on."""
        if not data.records:
            return
        try:  # a corrupt batch ends the records handed out: those before it are, then the partition fails
            batch, after, bad = answer.decode(fetch, data)
        except Exception as exc:  # noqa: BLE001 - undecodable: this partition fails, visibly, alone
            self.partition_failed(claim, bad_data(data.fetched_at, exc))
            return
        if batch.num_rows:
            claim.put(batch)
            self.owner.fetched_batches += 1
            self.owner.metrics.fetched(claim.topic, claim.partition, batch.num_rows, len(data.records),
                                       data.high_watermark - data.next_offset)
        if bad is not None:
            self.partition_failed(claim, bad_data(after, bad))

    async def _offset_out_of_range(self, claim: Claim, fetch: PartitionFetch, reset: Reset) -> str | None:
        """Move the position as `auto.offset.reset` says (the fetcher failed the partition if it says none)."""
        try:
            found = await resolve_offsets(self.owner.cluster, claim.topic, [claim.partition], reset.policy)
        except KafkaError as exc:
            return f"{fetch.where}: offset reset failed: {exc}"
        log.warning("group/%s %s offset %d out of range: reset to %s (%d)", self.owner.coordinator.group_id,
                    fetch.where, reset.offset, reset.policy, found[claim.partition])
        fetch.moved_to(found[claim.partition])
        return None


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)` on the member's loop, from a handler thread (one left behind may outlive it)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: the member has stopped
        log.warning("a handler thread ended after its member stopped: %s%r not run", fn.__name__, args)
