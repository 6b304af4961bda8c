"""MemberRuntime: one consumer-group member's life, without Ray: sessions, heartbeats, commits,
rebalances and the handler policy. It reads its claims through a `ClaimReader` and rejoins under
the cooperative protocol through a `CooperativeRejoin`.

Cardinality: one per group member, hosted by a `GroupMember` actor (`actors/group_member.py`) or
run in process by `raykafka consume -g`. Called by: its host (`start`, `status`, `stop`,
`wait_ended`) and, from the handler's threads, its `Session`s (`actors/group_session.py`).
Calls: the group coordinator (through `wire.group_coordinator`), its `ClaimReader`
(`actors/claim_reader.py`: the claims' offsets, their fetching, one handler thread per claim),
its `CooperativeRejoin` (`actors/cooperative_rejoin.py`: a cooperative session's rejoins), and
the user's handler's `setup` and `cleanup`.

A member lives through sessions, one per generation (Sarama's consumerGroupSession): join,
read committed offsets, `handler.setup(session)`, one thread per claim running
`handler.consume_claim(session, claim)`, and meanwhile the fetch loop, auto-commit and the
partition-count check. The session ends when the group rebalances (a heartbeat says so), a
subscribed topic grows, the topics a pattern matches change, a handler fails, or the member
stops; then claims close, the member
waits for its handlers (all of them together at most `rebalance.timeout.ms`), runs
`handler.cleanup`, commits what was marked with the ending generation, and rejoins.
Heartbeats run on their own task for the member's whole life, not per session, so they go on
while a session waits for slow handlers and while it opens.

Under the cooperative protocol (`partition.assignment.strategy=cooperative-sticky`, KIP-429) a
rebalance does not end the session: its `CooperativeRejoin` (`actors/cooperative_rejoin.py`)
joins again while the claims go on being fetched and handled, then closes only the claims the
new assignment leaves out and opens only the new ones; while that join is under way
(`_joining`) the member's own calls to rebalance go to it (`_rejoin`). A member left out of a
generation (its heartbeat or join answered that it is unknown, or that its generation is stale)
has lost its claims: its session ends as above; a commit refused while the member joins does
not say so, the join does.

Riding out faults, as librdkafka does: a broker that cannot be reached is asked again for as
long as the member runs, each connection attempt paced by the cluster's reconnect backoff
(`reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`); every other retriable
failure is retried after `retry.backoff.ms`. Only these end a member (`fatal` in its status):
an error `errors.is_fatal` names (authentication, authorization, FENCED_INSTANCE_ID, a config
the broker refuses), and handler failures past the policy below. A partition whose data cannot
be read (a corrupt batch; an offset out of range with `auto.offset.reset=none`) fails alone:
its claim ends with a `ConsumerError` naming it and the cause (`claim.error`, and the member's
`errors`), logged at ERROR; the member's other claims go on.

Handler policy: a handler that raises (in `setup`, `consume_claim` or `cleanup`) ends its
session; what it marked is committed and the member rejoins, so the batches it did not mark
come again. After `max_handler_failures` failures in a row with no offset marked between them,
the member stops with the last one as its fatal error.

Order kept: per claim, batches reach the handler in offset order. The claims' reading (opening
them at their committed offsets, the fetch loop that fills their queues and pauses a slow
handler's claim alone, the handler's thread per claim) is its `ClaimReader`'s
(`actors/claim_reader.py`).

Subscribed names that start with `^` are patterns (wire/subscription.py): before each join the
member looks up the topics they match and subscribes to those; while a session runs it looks
again every `metadata.max.age.ms` (or `topic.metadata.refresh.interval.ms`, if shorter), and a
topic that came or went ends the session, so that the member joins again with the new list.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..wire.cluster import Cluster
from ..wire.config import parse_config
from ..wire.errors import ConsumerError, KafkaError, is_fatal
from ..wire.fetcher import PartitionFetch
from ..wire.group_coordinator import Generation, GroupCoordinator, RebalanceNeeded
from ..wire.loop import LoopThread, wait_or
from ..wire.serde import Deserializers
from ..wire.subscription import TopicSubscription, external_topics
from .claim_reader import ClaimReader
from .cooperative_rejoin import CooperativeRejoin
from .cooperative_rejoin import follow_up_grace as follow_up_grace  # re-exported
from .group_session import Claim, Session, as_handler
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.group_member")

MAX_HANDLER_FAILURES = 3
COMMIT_RETRIES = 3  # a commit's retries on a coordinator that moved or did not answer


def stop_bound(config: dict[str, Any]) -> float:
    """Seconds a member's stop may take: its handlers get `rebalance.timeout.ms`, then cleanup,
    the last commit and LeaveGroup are a few requests each."""
    return config["rebalance.timeout.ms"] / 1000 + 4 * config["request.timeout.ms"] / 1000 + 10


class MemberError(NamedTuple):
    """One error a member met. `kind`: "partition" (that claim ended), "handler" (the session
    ended, the member rejoined) or "fatal" (the member ended); `where` names the partition
    ("topic/partition"), the handler call, or the member."""

    kind: str
    where: str
    cause: str


class MemberRuntime:
    """One member's life: sessions until stopped, or until a fatal error."""

    def __init__(self, config: dict[str, Any], topics: list[str], handler: Any,
                 max_handler_failures: int = MAX_HANDLER_FAILURES):
        self.config = parse_config(config)
        if not self.config["group.id"]:
            raise ValueError("group.id: required for a consumer group")
        self.subscription = TopicSubscription.of(topics)
        if not self.subscription.names and not self.subscription.has_patterns:
            raise ValueError("topics: a consumer group needs at least one topic")
        self.topics = list(self.subscription.names)  # and, with patterns, the topics they matched last
        if max_handler_failures < 1:
            raise ValueError(f"max_handler_failures: must be at least 1, got {max_handler_failures}")
        self.handler = as_handler(handler)
        self.deserialize = Deserializers.from_config(self.config)
        self.max_handler_failures = max_handler_failures
        self.cluster = Cluster(self.config)
        self.coordinator = GroupCoordinator(self.cluster, self.config, self.topics)
        self.loop = LoopThread("raykafka-member")
        self.metrics = ConsumerMetrics(self.config["group.id"], self.config["group.id"])
        self.reader = ClaimReader(self)
        self.cooperative = CooperativeRejoin(self, self.reader)
        self.session: Session | None = None
        self.generations = 0
        self.fetched_batches = 0
        self.heartbeats = 0  # answered heartbeats
        self.handler_failures = 0  # in a row, with nothing marked between them
        self.errors: list[MemberError] = []
        self.error: str | None = None  # the last error met, of any kind
        self.fatal: str | None = None  # the error that ended the member
        self.last_end_reason = ""
        self._fatal_error: BaseException | None = None
        self._end: Callable[[str], None] | None = None  # ends the current session
        # under the cooperative protocol: asks the session to join again beside its claims
        self._rejoin: Callable[[str, bool], None] | None = None
        self._joining = False  # a cooperative session's join is under way (it keeps the membership)
        self.revoked = 0  # partitions given up while the session went on (the cooperative protocol)
        self._stop: asyncio.Event | None = None
        self._future: Any = None

    # -- life ----------------------------------------------------------------

    def start(self) -> None:
        self._future = self.loop.submit(self._run())

    def wait_ended(self) -> None:
        """Return once the member's life has ended (stopped or failed)."""
        if self._future is not None:
            concurrent.futures.wait([self._future])

    def run_on_loop(self, coro: Any) -> Any:
        return self.loop.run(coro, self.config["request.timeout.ms"] / 1000 * 2)

    def stop(self, timeout: float | None = None) -> None:
        """End the session, commit, leave the group; return once done (or after `timeout`, by
        default `stop_bound()`, with the overrun recorded as an error). A fatal error that
        ended the member is in `fatal`, not raised here."""
        if self._future is None:
            return
        timeout = stop_bound(self.config) if timeout is None else timeout
        self.loop.loop.call_soon_threadsafe(self._request_stop)
        try:
            self._future.result(timeout)
        except TimeoutError:
            self._record("fatal", "member", f"did not stop within {timeout:.0f}s")
        except Exception as exc:  # noqa: BLE001 - the fatal error, already in self.fatal
            log.debug("member ended with %r", exc)
        finally:
            try:
                self.run_on_loop(self.cluster.close())
            finally:
                self.loop.stop()

    def _request_stop(self) -> None:
        if self._stop is None:
            self._stop = asyncio.Event()
        self._stop.set()
        if self._end is not None:
            self._end("stop")

    def status(self) -> dict[str, Any]:
        s = self.session
        return {"member_id": self.coordinator.member_id, "generation_id": self.coordinator.generation_id,
                "claims": dict(s.claims) if s else {}, "generations": self.generations,
                "fetched_batches": self.fetched_batches, "heartbeats": self.heartbeats, "error": self.error,
                "fatal": self.fatal, "errors": list(self.errors),
                "failed_partitions": {c.topic + "/" + str(c.partition): str(c.error)
                                      for c in (s.claim_list() if s else ()) if c.error is not None},
                "committed": dict(s.committed) if s else {}, "last_end_reason": self.last_end_reason,
                "revoked": self.revoked, "joining": self._joining, "lag": s.lag() if s else 0,
                "metrics": self.metrics.snapshot()}

    async def _run(self) -> None:
        if self._stop is None:
            self._stop = asyncio.Event()
        leaving = asyncio.Event()
        heartbeat = asyncio.ensure_future(self._heartbeat_loop(leaving))
        try:
            while not self._stop.is_set():
                await self._look_up_subscription()
                generation = await self._unless_stopped(self.coordinator.join())
                if generation is None:
                    break
                self.generations += 1
                self.metrics.rebalanced()
                await self._session(generation)
                if self._fatal_error is not None:
                    raise self._fatal_error
        except Exception as exc:
            if self.fatal is None:
                self._record("fatal", "member", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            leaving.set()  # the loop ends at its next turn even if a cancel is lost inside a request
            heartbeat.cancel()
            await asyncio.wait([heartbeat], timeout=self.config["request.timeout.ms"] / 1000)
            await self.coordinator.leave()

    async def _unless_stopped(self, coro: Awaitable[Any], stop_event: asyncio.Event | None = None) -> Any:
        """`coro`'s result, or None if the member is told to stop first, or `stop_event` is set
        first (then `coro` is cancelled)."""
        assert self._stop is not None
        task = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future((stop_event or self._stop).wait())
        try:
            await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this is cancelled: neither is left pending for the loop's close
            for pending in (stop, task):
                if not pending.done():
                    pending.cancel()
                    await asyncio.wait([pending])
        return None if task.cancelled() else task.result()

    def _record(self, kind: str, where: str, cause: str) -> None:
        self.errors.append(MemberError(kind, where, cause))
        self.error = cause
        if kind == "fatal" and self.fatal is None:
            self.fatal = f"{where}: {cause}"
            log.error("group/%s member %s failed: %s", self.coordinator.group_id, self.coordinator.member_id,
                      self.fatal)

    def _fail_member(self, error: BaseException) -> None:
        """A fatal error: record it, end the session; `_run` ends after the session's last commit."""
        if self._fatal_error is None:
            self._fatal_error = error
            self._record("fatal", "member", f"{type(error).__name__}: {error}")
        if self._end is not None:
            self._end(f"fatal: {error}")

    def _rebalance(self, why: str, keeps_claims: bool = True, stale: bool = False, seen_here: bool = False) -> None:
        """The group wants this member to join again. Under the cooperative protocol, while its
        generation stands, the session goes on and joins beside its claims (`CooperativeRejoin.run`);
        otherwise the session ends, and the next one joins. An answer about a generation the
        member has left since (`stale`: a heartbeat or a commit in flight across a join) is no
        such call: acting on it would start one more rebalance, and the group's others another.
        `seen_here`: the member found it itself (a topic grew, a pattern matched anew), so a join
        under way, which subscribed before it, does not answer it."""
        if stale:
            log.debug("group/%s ignored, being about an earlier generation: %s", self.coordinator.group_id, why)
            return
        if self._joining and not keeps_claims:
            # a commit sent before the cooperative join, answered during it: the join under way
            # says whether the member is still in the group (a lost join ends the session)
            log.debug("group/%s ignored while the member joins: %s", self.coordinator.group_id, why)
            return
        if self._rejoin is not None and keeps_claims and self.coordinator.generation_id >= 0:
            self._rejoin(why, seen_here)
        elif self._end is not None:
            self._end(why)

    # -- heartbeats, for the member's whole life -------------------------------

    async def _heartbeat_loop(self, leaving: asyncio.Event) -> None:
        """Heartbeat every `heartbeat.interval.ms` while the member holds a generation (a session
        is open, opening or closing), until it leaves; tell the session when the group moved on,
        when the coordinator has not answered for `session.timeout.ms`, or when the member is fenced."""
        interval = self.config["heartbeat.interval.ms"] / 1000
        session_timeout = self.config["session.timeout.ms"] / 1000
        last_ok = time.monotonic()
        while True:
            await wait_or(leaving, interval)
            if leaving.is_set():
                return
            end = self._end
            if end is not None and self._joining:  # a cooperative session joins beside its claims
                cut_off = self.coordinator.unanswered_since
                if cut_off is not None and time.monotonic() - cut_off > session_timeout:
                    # the group may have expired this member and given its claims to others
                    end(f"no coordinator answered its join for {time.monotonic() - cut_off:.1f}s "
                        f"(session.timeout.ms): its claims may be another's")
            if end is None or self._joining:  # joining: the join itself keeps the membership
                last_ok = time.monotonic()
                continue
            try:
                await self.coordinator.heartbeat()
                self.heartbeats += 1
                last_ok = time.monotonic()
            except RebalanceNeeded as exc:
                self._rebalance(f"rebalance ({exc})", exc.keeps_claims, exc.stale)
            except KafkaError as exc:
                if is_fatal(exc):
                    self._fail_member(exc)
                    continue
                silent = time.monotonic() - last_ok
                log.info("group/%s heartbeat failed (%.1fs without an answer): %s", self.coordinator.group_id,
                         silent, exc)
                if silent > session_timeout:
                    end(f"no heartbeat answered for {silent:.1f}s (session.timeout.ms): {exc}")
            except Exception:  # never let heartbeats die silently
                log.exception("group/%s heartbeat failed", self.coordinator.group_id)

    # -- one session -----------------------------------------------------------

    async def _session(self, generation: Generation) -> None:
        over = asyncio.Event()
        reason: list[str] = []

        def end(why: str) -> None:
            if not over.is_set():
                reason.append(why)
                over.set()

        self._end = end
        if self._stop is not None and self._stop.is_set():
            end("stop")
        try:
            await self._run_session(generation, over, end)
        finally:
            self._end = None
            self.last_end_reason = reason[0] if reason else ""
            log.info("group/%s member %s generation %d ended: %s", self.coordinator.group_id,
                     generation.member_id, generation.generation_id, self.last_end_reason)

    async def _run_session(self, generation: Generation, over: asyncio.Event, end: Callable[[str], None]) -> None:
        """Open the claims, run the handler on them until the session ends, commit what it marked."""
        claims = await self.reader.open_claims(generation.claims, over, end)
        session = self.session = Session(self, generation, {} if claims is None else claims)  # the same dict
        if claims is None:  # the session ended while it opened
            return
        bound = self.config["rebalance.timeout.ms"] / 1000  # for the handler's setup, and again to wind down
        if await self._call_handler("setup", self.handler.setup, session, over, end, bound):
            loop = asyncio.get_running_loop()
            threads = {tp: self.reader.start_claim(session, c, end) for tp, c in claims.items()}
            await self._consume(session, generation, claims, threads, over, end)
            await self._wind_down(session, claims, list(threads.values()), loop.time() + bound, end)
        try:
            await self.commit_session(session)
        except (RebalanceNeeded, KafkaError) as exc:
            if is_fatal(exc):
                self._fail_member(exc)
            log.warning("commit at the end of generation %d failed: %s", session.generation_id, exc)
        finally:
            with session._lock:
                session.ended = True

    async def _consume(self, session: Session, generation: Generation, claims: dict[tuple[str, int], Claim],
                       threads: dict[tuple[str, int], threading.Thread], over: asyncio.Event,
                       end: Callable[[str], None]) -> None:
        """The session's loops (fetching, auto-commit, the partition-count check, and under the
        cooperative protocol the rejoins) until it ends."""
        positions = {tp: PartitionFetch(self.config, *tp, c.initial_offset) for tp, c in claims.items()}
        loops = [self.reader.fetch_loop(claims, positions, over), self._auto_commit_loop(session, over),
                 self._partition_check()]
        if generation.cooperative:
            loops.append(self.cooperative.run(session, generation, claims, positions, threads, over, end))
        tasks = [asyncio.ensure_future(coro) for coro in loops]
        await asyncio.wait([asyncio.ensure_future(over.wait()), *tasks], return_when=asyncio.FIRST_COMPLETED)
        end("a session task ended")
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks, timeout=self.config["request.timeout.ms"] / 1000)  # their cancellations run
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                self._task_failed(t.exception())

    async def _wind_down(self, session: Session, claims: dict[tuple[str, int], Claim], threads: list[threading.Thread],
                         deadline: float, end: Callable[[str], None]) -> None:
        """Close the claims, give the handlers until `deadline` (loop time) to return, run cleanup.
        Heartbeats go on meanwhile; a handler still running at the deadline is left behind."""
        loop = asyncio.get_running_loop()
        for c in claims.values():
            c.close()
        for t in threads:
            await asyncio.to_thread(t.join, max(0.0, deadline - loop.time()))
        for t in threads:
            if t.is_alive():
                self._handler_failed(t.name.replace("claim-", "consume_claim "), TimeoutError(
                    f"still running {self.config['rebalance.timeout.ms']} ms (rebalance.timeout.ms) after "
                    f"generation {session.generation_id} ended; left behind"))
        await self._call_handler("cleanup", self.handler.cleanup, session, None, end, max(1.0, deadline - loop.time()))

    def _task_failed(self, error: BaseException) -> None:
        if is_fatal(error) or not isinstance(error, KafkaError):
            log.error("session task failed: %r", error)
            self._fail_member(error)
        else:
            log.warning("session task failed: %r", error)

    async def _call_handler(self, name: str, fn: Callable[[Session], Any], session: Session,
                            over: asyncio.Event | None, end: Callable[[str], None],
                            timeout: float | None = None) -> bool:
        """Run `handler.setup` or `.cleanup` in a thread (bounded by `timeout`); a failure ends the
        session and counts against the handler policy. True if it returned."""
        if over is not None and over.is_set():
            return False
        try:
            await asyncio.wait_for(asyncio.to_thread(fn, session), timeout)
            return True
        except Exception as exc:  # noqa: BLE001 - the handler's error: recorded, the policy decides
            self._handler_failed(name, exc)
            end(f"{name} raised {type(exc).__name__}: {exc}")
            return False

    def _handler_failed(self, where: str, exc: BaseException) -> None:
        self.handler_failures += 1
        cause = f"{where} raised {type(exc).__name__}: {exc}"
        log.error("group/%s %s (%d in a row)", self.coordinator.group_id, cause, self.handler_failures)
        self._record("handler", where, cause)
        if self.handler_failures >= self.max_handler_failures:
            self._fail_member(ConsumerError(f"the handler failed {self.handler_failures} times in a row "
                                            f"(max_handler_failures={self.max_handler_failures}): {cause}"))

    # -- the session's other loops ----------------------------------------------

    async def _auto_commit_loop(self, session: Session, over: asyncio.Event) -> None:
        if not self.config["enable.auto.commit"]:
            await over.wait()
            return
        interval = self.config["auto.commit.interval.ms"] / 1000
        while not over.is_set():
            await wait_or(over, interval)
            if self._joining:
                # the rejoin committed just before it joined; a commit now would wait behind the
                # JoinGroup (a broker answers a connection's requests in order) and carry a
                # generation the join is replacing: refused, its marks would wait for the next turn
                continue
            try:
                await self.commit_session(session)
            except RebalanceNeeded as exc:
                if self._rejoin is None and not exc.stale:
                    return  # the heartbeat ends the session
                self._rebalance(f"rebalance ({exc})", exc.keeps_claims, exc.stale)  # marks commit at a later turn
            except KafkaError as exc:
                if is_fatal(exc):
                    raise
                log.warning("auto-commit failed: %s", exc)

    async def _partition_check(self) -> None:
        """Sarama's loopCheckPartitionNumbers: a subscribed topic that grows means a rebalance; so
        does, with patterns, a topic that comes to match or goes away. An eager session ends at
        the first; a cooperative one joins again and this goes on watching."""
        interval = self.config["topic.metadata.refresh.interval.ms"] / 1000
        if self.subscription.has_patterns:
            interval = min(interval, self.config["metadata.max.age.ms"] / 1000)
        counts = self._known_counts()
        while True:
            await asyncio.sleep(interval)
            if await self._look_up_subscription():
                self._rebalance(f"subscribed topics changed to {self.topics}", seen_here=True)  # the rejoin subscribes
                if self._rejoin is None:
                    return
                counts = self._known_counts()
                continue
            now = await self._partition_counts()
            if now is None:
                continue
            # a topic this member knew nothing of (it resolved no offset: its claims all committed,
            # or none) takes its first count from this look, rather than taking it for a change;
            # the leader, which split the partitions, knows every count and sees a topic grow
            counts.update({t: n for t, n in now.items() if counts.get(t) is None})
            if any(now[t] != counts[t] for t in self.topics if now[t]):
                self._rebalance(f"partition count changed {counts} -> {now}", seen_here=True)  # the leader rebalances
                if self._rejoin is None:
                    return
            counts = now

    def _known_counts(self) -> dict[str, int | None]:
        """Each subscribed topic's partition count as this member's metadata has it: None for a
        topic it has no metadata of, 0 for one the broker said does not exist."""
        metadata = self.cluster.metadata
        return {t: len(metadata.partitions(t)) if t in metadata.topics else None for t in self.topics}

    async def _partition_counts(self) -> dict[str, int] | None:
        """Each subscribed topic's partition count, from a fresh look-up; None if it failed."""
        try:
            metadata = await self.cluster.refresh_metadata(self.topics)
        except KafkaError as exc:
            if is_fatal(exc):
                raise
            return None
        return {t: len(metadata.partitions(t)) for t in self.topics}

    async def _look_up_subscription(self) -> bool:
        """With patterns: the topics they match now become the subscription the next join sends;
        True if that changed. A look-up that fails keeps the last list (it is tried again)."""
        if not self.subscription.has_patterns:
            return False
        try:
            metadata = await self.cluster.refresh_metadata(None)
        except KafkaError as exc:
            if is_fatal(exc):
                raise
            log.warning("group/%s looking up the topics of %s failed: %s", self.coordinator.group_id,
                        self.subscription, exc)
            return False
        topics = self.subscription.topics(external_topics(metadata.topics))
        if topics == self.topics:
            return False
        log.info("group/%s %s matches %s (was %s)", self.coordinator.group_id, self.subscription, topics, self.topics)
        self.topics = self.coordinator.topics = topics
        return True

    async def commit_session(self, session: Session, retries: int = COMMIT_RETRIES) -> None:
        offsets = session.uncommitted()
        if not offsets:
            return
        await self.coordinator.commit(offsets, retries)
        self.metrics.committed()
        with session._lock:
            session.committed.update(offsets)
