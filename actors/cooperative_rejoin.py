"""CooperativeRejoin: a group member's rejoins under the cooperative protocol (KIP-429).

Cardinality: one per `MemberRuntime` (`actors/group_member_state.py`), which makes it and, for a
session whose generation is cooperative, runs its `run` beside the session's other loops until
the session ends. Calls: the group coordinator (to join, through its member), its member's
`ClaimReader` (`actors/claim_reader.py`) to open the partitions a new generation adds and start
their handlers, and back to its member through `RejoinOwner`: the commit, the subscription's
look-up, a handler failed, a fatal error. No Ray here.

Under the cooperative protocol (`partition.assignment.strategy=cooperative-sticky`) a rebalance
does not end the session: the member joins again while its claims go on being fetched and
handled, then closes only the claims the new assignment leaves out (their handlers return,
their marks are committed) and opens only the new ones. A round that revoked anything is
followed by another, in which the leader gives those partitions to their new members; its join
waits `follow_up_grace()` (or until the group calls a rebalance), so that the members of the
generation just formed have their assignment before it starts the next one. What is marked is
committed just before each such join and not while it is under way (the commit would carry the
generation the join replaces). A member left out of a generation has lost its claims: its
session ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..wire.errors import KafkaError, is_fatal
from ..wire.fetcher import PartitionFetch
from ..wire.group_coordinator import Generation, GroupCoordinator, RebalanceNeeded
from ..wire.loop import wait_or
from .claim_reader import ClaimReader
from .group_session import Claim, Session
from .metrics import ConsumerMetrics

log = logging.getLogger("raykafka.actors.group_member")

# how often a broker may look again at a SyncGroup that waits for the leader's assignment (tansu:
# once a second); a Kafka coordinator answers every waiting SyncGroup the moment the leader's comes
SYNC_POLL_S = 1.0


def follow_up_grace(config: dict[str, Any]) -> float:
    """Seconds a cooperative member that gave up partitions waits before the join that lets them
    be given out, unless the group calls a rebalance first. Its join changes its subscription, so
    it starts a new generation; a member of the one just formed that has not had its SyncGroup
    answered yet is then refused (REBALANCE_IN_PROGRESS, on tansu only after it waited 0.8 of
    `session.timeout.ms`), holds nothing meanwhile, and joins a round late. The others heard of
    the rebalance within a heartbeat of each other, so their joins, and then their SyncGroups, are
    answered within `heartbeat.interval.ms` and a broker's poll of the waiting SyncGroups."""
    return config["heartbeat.interval.ms"] / 1000 + SYNC_POLL_S


class RejoinOwner(Protocol):
    """What a `CooperativeRejoin` takes from its member (`MemberRuntime`): its config, coordinator
    and metrics; the counts it keeps (`generations`, `revoked`); the two marks the member's other
    loops read (`_joining`: a join is under way; `_rejoin`: how to ask for one); and the member's
    own steps it takes (wait unless stopped, look up the subscription, commit, rebalance, fail)."""

    config: dict[str, Any]
    coordinator: GroupCoordinator
    metrics: ConsumerMetrics
    generations: int
    revoked: int
    _joining: bool
    _rejoin: Callable[[str, bool], None] | None

    async def _unless_stopped(self, coro: Awaitable[Any], stop_event: asyncio.Event | None = None) -> Any: ...

    async def _look_up_subscription(self) -> bool: ...

    async def commit_session(self, session: Session, retries: int = ...) -> None: ...

    def _rebalance(self, why: str, keeps_claims: bool = True, stale: bool = False,
                   seen_here: bool = False) -> None: ...

    def _fail_member(self, error: BaseException) -> None: ...

    def _handler_failed(self, where: str, exc: BaseException) -> None: ...


class CooperativeRejoin:
    """Joins again beside a session's claims, then closes the revoked ones and opens the new."""

    def __init__(self, owner: RejoinOwner, reader: ClaimReader):
        self.owner = owner
        self.reader = reader

    async def run(self, session: Session, generation: Generation, claims: dict[tuple[str, int], Claim],
                  positions: dict[tuple[str, int], PartitionFetch],
                  threads: dict[tuple[str, int], threading.Thread], over: asyncio.Event,
                  end: Callable[[str], None]) -> None:
        """Each rebalance the group asks for, joined while the claims go on being fetched and
        handled; then only the partitions the new assignment leaves out close, and only the new
        ones open. A round that revoked any is followed by another, which gives them to their new
        members, after `follow_up_grace()` unless the group calls one first. A member left out of
        a generation meanwhile ends the session: what it held may be another's already."""
        owner = self.owner
        asked = asyncio.Event()
        called = asyncio.Event()  # a request other than a follow-up: nothing to wait for
        reasons: list[str] = []
        after_join: list[str] = []  # what the member found while it joined: asked once the join is done
        loop = asyncio.get_running_loop()
        grace = follow_up_grace(owner.config)
        follow_up_at = 0.0  # loop time before which a follow-up join waits

        def rejoin(why: str, seen_here: bool = False, follow_up: bool = False) -> None:
            nonlocal follow_up_at
            if owner._joining:  # the join under way answers the group's call (a commit refused meanwhile)
                if seen_here:
                    after_join.append(why)
                return
            reasons.append(why)
            if follow_up:
                follow_up_at = loop.time() + grace
            else:
                called.set()
            asked.set()

        owner._rejoin = rejoin
        if generation.cooperative and generation.revoked:  # the session's own join left some out
            rejoin(f"gave up {generation.revoked} at the join", follow_up=True)
        try:
            while not over.is_set():
                await owner._unless_stopped(asked.wait(), over)
                if not called.is_set() and loop.time() < follow_up_at:
                    # the others of the generation just formed may not have their assignment yet
                    await owner._unless_stopped(wait_or(called, follow_up_at - loop.time()), over)
                if over.is_set():
                    return
                asked.clear()
                called.clear()
                member_id = owner.coordinator.member_id
                log.info("group/%s member %s joins again, keeping its claims: %s", owner.coordinator.group_id,
                         member_id, "; ".join(reasons))
                reasons.clear()
                owner._joining = True  # from here a call to rebalance is answered by this join
                try:
                    await self._commit_before_join(session)
                    if over.is_set():
                        return
                    await owner._look_up_subscription()
                    generation = await owner._unless_stopped(owner.coordinator.join(), over)
                finally:
                    owner._joining = False
                if generation is None:
                    return
                owner.generations += 1
                owner.metrics.rebalanced()
                if generation.lost or not generation.cooperative or generation.member_id != member_id:
                    end("the group moved to the eager protocol" if not generation.cooperative
                        else f"member {member_id} was left out of a generation; its claims are lost")
                    return
                revoked = await self._revoke(session, generation, claims, positions, threads, end)
                await self._add(session, generation, claims, positions, threads, over, end)
                if revoked or generation.revoked:
                    rejoin(f"gave up {revoked or generation.revoked}", follow_up=True)
                if after_join:
                    rejoin("; ".join(after_join))
                    after_join.clear()
        finally:
            owner._rejoin = None

    async def _commit_before_join(self, session: Session) -> None:
        """Commit what is marked before a cooperative rejoin (as the Java consumer does before it
        joins), while the generation the marks were made in is the group's, or the one it is
        replacing. A refusal changes nothing here: the join tells whether the member is still in
        the group, and if it is not its session ends. One attempt, for at most
        `heartbeat.interval.ms`: the member does not heartbeat meanwhile, and a coordinator that
        does not answer is the join's to ride out (its silence counts against the session)."""
        owner = self.owner
        bound = owner.config["heartbeat.interval.ms"] / 1000
        try:
            await asyncio.wait_for(owner.commit_session(session, retries=0), bound)
        except TimeoutError:
            log.info("group/%s commit before the rejoin not answered within %.1fs (heartbeat.interval.ms); "
                     "joining", owner.coordinator.group_id, bound)
        except (RebalanceNeeded, KafkaError) as exc:
            if is_fatal(exc):
                owner._fail_member(exc)
            log.info("group/%s commit before the rejoin failed: %s", owner.coordinator.group_id, exc)

    async def _revoke(self, session: Session, generation: Generation, claims: dict[tuple[str, int], Claim],
                      positions: dict[tuple[str, int], PartitionFetch],
                      threads: dict[tuple[str, int], threading.Thread], end: Callable[[str], None]) -> list[str]:
        """Close the claims `generation` no longer gives this member, give their handlers until
        `rebalance.timeout.ms` to return, commit what they marked, and forget them."""
        owner = self.owner
        assigned = {(t, p) for t, ps in generation.claims.items() for p in ps}
        gone = sorted(set(claims) - assigned)
        with session._lock:
            session.generation_id = generation.generation_id
        if not gone:
            return []
        for tp in gone:
            claims[tp].close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + owner.config["rebalance.timeout.ms"] / 1000
        for tp in gone:
            thread = threads[tp]  # forgotten only once joined: a session ending meanwhile still waits for it
            await asyncio.to_thread(thread.join, max(0.0, deadline - loop.time()))
            threads.pop(tp)
            if thread.is_alive():
                owner._handler_failed(f"consume_claim({tp[0]}/{tp[1]})", TimeoutError(
                    f"still running {owner.config['rebalance.timeout.ms']} ms (rebalance.timeout.ms) after its "
                    f"partition was revoked; left behind"))
        try:
            await owner.commit_session(session)
        except (RebalanceNeeded, KafkaError) as exc:
            if is_fatal(exc):
                owner._fail_member(exc)
            log.warning("group/%s commit of the revoked %s failed: %s", owner.coordinator.group_id, gone, exc)
        with session._lock:  # a mark not committed now is not committed later: another member owns it
            for tp in gone:
                del claims[tp]
                positions.pop(tp, None)
                session.marked.pop(tp, None)
                session.committed.pop(tp, None)
            session.claims_changed()
        owner.revoked += len(gone)
        return [f"{t}/{p}" for t, p in gone]

    async def _add(self, session: Session, generation: Generation, claims: dict[tuple[str, int], Claim],
                   positions: dict[tuple[str, int], PartitionFetch],
                   threads: dict[tuple[str, int], threading.Thread], over: asyncio.Event,
                   end: Callable[[str], None]) -> None:
        """Open the claims `generation` gives this member anew, and start their handlers."""
        new = {t: kept for t, ps in generation.claims.items() if (kept := [p for p in ps if (t, p) not in claims])}
        if not new:
            return
        opened = await self.reader.open_claims(new, over, self.owner._rebalance)
        if opened is None:  # a rebalance or the session's end came first; the next join gives them again
            return
        with session._lock:
            claims.update(opened)
            session.claims_changed()
        for tp, claim in opened.items():
            positions[tp] = PartitionFetch(self.owner.config, *tp, claim.initial_offset)
            threads[tp] = self.reader.start_claim(session, claim, end)
