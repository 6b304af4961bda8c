"""Consumer-group membership without Ray: the client side of the classic group protocol.

One `GroupCoordinator` per group member. `join` is Sarama's newSession: FindCoordinator,
JoinGroup, and if elected leader the balance strategy, then SyncGroup; it returns this
member's claims for the new generation. `heartbeat`, `commit`, `fetch_offsets` and `leave`
carry the generation and member id on every request.

Error handling, as the seed lists it:
  UNKNOWN_MEMBER_ID         -> forget the member id, rejoin at once
  ILLEGAL_GENERATION        -> rejoin at once
  REBALANCE_IN_PROGRESS     -> rejoin after backoff
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a dropped connection
                            -> rediscover the coordinator after backoff
  COORDINATOR_LOAD_IN_PROGRESS -> retry after backoff
  MEMBER_ID_REQUIRED        -> retry at once with the member id the broker gave
  a fatal error (`errors.is_fatal`: authentication, authorization, FENCED_INSTANCE_ID, a
  session timeout or protocol the broker refuses) -> raised at once: the member ends
Any other failure is retried after `retry.backoff.ms`, for as long as the member runs (or
`max_retries` times, where a caller gives a bound); reconnecting to a broker that is down waits
the cluster's reconnect backoff (`reconnect.backoff.ms` growing to `reconnect.backoff.max.ms`),
so a join rides out a broker outage of any length.
Outside `join`, a code that means "rejoin" raises `RebalanceNeeded`.

A leader that never assigns: tansu (0.6) can keep naming as leader a member that left or
expired while the group was forming, and then every follower's SyncGroup answers
REBALANCE_IN_PROGRESS for ever; a Kafka coordinator would have moved on to a new generation
within the session timeout. `AbsentLeader` notices it and the follower takes the absent leader's
member id (see there).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import messages
from .assignors import (
    ASSIGNORS,
    Assignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from .errors import BY_NAME, BrokerConnectionError, BrokerError, KafkaError, RequestTimedOutError, is_fatal

log = logging.getLogger("raykafka.wire.group")

NONE = BY_NAME["NONE"].code
COORDINATOR_LOAD_IN_PROGRESS = BY_NAME["COORDINATOR_LOAD_IN_PROGRESS"].code
COORDINATOR_NOT_AVAILABLE = BY_NAME["COORDINATOR_NOT_AVAILABLE"].code
NOT_COORDINATOR = BY_NAME["NOT_COORDINATOR"].code
ILLEGAL_GENERATION = BY_NAME["ILLEGAL_GENERATION"].code
UNKNOWN_MEMBER_ID = BY_NAME["UNKNOWN_MEMBER_ID"].code
REBALANCE_IN_PROGRESS = BY_NAME["REBALANCE_IN_PROGRESS"].code
MEMBER_ID_REQUIRED = BY_NAME["MEMBER_ID_REQUIRED"].code
FENCED_INSTANCE_ID = BY_NAME["FENCED_INSTANCE_ID"].code
UNSTABLE_OFFSET_COMMIT = BY_NAME["UNSTABLE_OFFSET_COMMIT"].code

REJOIN_CODES = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS})
COORDINATOR_CODES = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


class RebalanceNeeded(KafkaError):
    """The group moved on (new generation, or this member is unknown): end the session, rejoin."""

    def __init__(self, code: int, context: str, stale: bool = False):
        self.code = code
        self.stale = stale  # said of a generation the member has left since (the request was sent before a join)
        super().__init__(f"{context}: {BrokerError(code).name}: rejoin the group")

    @property
    def keeps_claims(self) -> bool:
        """The group is rebalancing and this member's generation still stands: under the
        cooperative protocol it rejoins holding its claims. Any other code means the member was
        left out of a generation, and what it held may be another's already (KIP-429's lost)."""
        return self.code == REBALANCE_IN_PROGRESS


class CoordinatorLost(KafkaError):
    retriable = True


class AbsentLeader:
    """Whether the leader a follower's SyncGroup waits for is gone for good.

    tansu 0.6 keeps a group's leader when that member leaves, or its session expires, while the
    group is forming, and a new joiner's SyncGroup then answers REBALANCE_IN_PROGRESS, with the
    same generation and the same absent leader, however often it rejoins. A live leader assigns
    within a round trip of its own join, and a Kafka coordinator ends a silent leader's session
    with a new generation, so the same (generation, leader) refusing a follower for longer than
    `session.timeout.ms` means nobody is left to assign. Then the follower leaves under its own
    member id and joins under the leader's: it is the leader, and assigns (tansu does not check
    whose member id a join gives). Each follower waits a random extra share of the session
    timeout, so that two stranded followers rarely take over at once."""

    def __init__(self, session_timeout_ms: int, clock: Callable[[], float] = time.monotonic,
                 share: Callable[[], float] = random.random):
        self.session = session_timeout_ms / 1000
        self._clock, self._share = clock, share
        self._seen: tuple[int, str] | None = None
        self._since = 0.0
        self._limit = 0.0

    def refused(self, generation_id: int, leader: str) -> bool:
        """A SyncGroup of this generation answered REBALANCE_IN_PROGRESS while `leader` leads;
        whether to take over from that leader now."""
        now = self._clock()
        if self._seen != (generation_id, leader):
            self._seen, self._since = (generation_id, leader), now
            self._limit = self.session * (1 + self._share())
            return False
        return now - self._since >= self._limit

    def reset(self) -> None:
        self._seen = None


@dataclass
class Generation:
    """What one successful join yields: the session's identity and this member's claims."""

    generation_id: int
    member_id: str
    leader_id: str
    protocol: str
    claims: dict[str, list[int]]
    plan: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # leader only: everyone's claims
    # what this member said it owned when it joined and was not given: under the cooperative
    # protocol it gives them up and joins again at once, so that the next round gives them out
    revoked: dict[str, list[int]] = field(default_factory=dict)
    # the join met UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: what the member held may be another's
    lost: bool = False

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.member_id

    @property
    def cooperative(self) -> bool:
        """The group chose KIP-429's incremental protocol: a rebalance revokes only what moves."""
        assignor = ASSIGNORS.get(self.protocol)
        return assignor is not None and assignor.cooperative


class GroupCoordinator:
    """Membership state of one member: member id, generation, claims."""

    def __init__(self, cluster: Any, config: Mapping[str, Any], topics: Iterable[str], *,
                 max_retries: int | None = None, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        self.cluster = cluster
        self.group_id: str = config["group.id"]
        if not self.group_id:
            raise ValueError("group.id: required for a consumer group")
        self.instance_id: str | None = config.get("group.instance.id")
        self.session_timeout_ms: int = config["session.timeout.ms"]
        self.rebalance_timeout_ms: int = config["rebalance.timeout.ms"]
        self.backoff = config["retry.backoff.ms"] / 1000
        names = config["partition.assignment.strategy"]
        if isinstance(names, str):  # the default is not run through the config check
            names = [n.strip() for n in names.split(",")]
        self.assignors: list[Assignor] = [get_assignor(n) for n in names]
        self.topics = sorted(set(topics))
        self.max_retries = max_retries
        self._sleep = sleep
        self.member_id = ""
        self.generation_id = -1
        self.claims: dict[str, list[int]] = {}
        self.absent_leader = AbsentLeader(self.session_timeout_ms)
        # since when (time.monotonic()) joins have met no coordinator at all; None once one answers
        self.unanswered_since: float | None = None

    # -- join: Sarama's newSession ----------------------------------------

    async def join(self) -> Generation:
        """Join (or rejoin) the group and return this member's claims for the new generation.

        Retries until it succeeds (or `max_retries` failures, if set); raises a fatal error at once."""
        retries = self.max_retries
        failures = 0
        lost = False
        while True:
            try:
                owned = {t: list(ps) for t, ps in self.claims.items()}  # what the join's subscription says
                log.debug("group/%s/%s JoinGroup sent (generation %d, owning %s)", self.group_id, self.member_id,
                          self.generation_id, owned)
                join = await self._join_group()
                self.unanswered_since = None
                code = join.error_code
                log.debug("group/%s/%s JoinGroup answered %s: generation %s, leader %s", self.group_id,
                          join.get("member_id") or self.member_id, BrokerError(code).name if code else "NONE",
                          join.get("generation_id"), join.get("leader"))
                if code == MEMBER_ID_REQUIRED:
                    self.member_id = join.member_id
                    continue
                if code == NONE:
                    self.member_id = join.member_id
                    self.generation_id = join.generation_id
                    plan = await self._balance(join) if join.leader == join.member_id else {}
                    sync = await self._sync_group(join.generation_id, join.protocol_name, plan)
                    code = sync.error_code
                    log.debug("group/%s/%s SyncGroup of generation %d answered %s", self.group_id, self.member_id,
                              join.generation_id, BrokerError(code).name if code else "NONE")
                    if code == NONE:
                        self.absent_leader.reset()
                        self.claims = decode_assignment(sync.assignment).partitions
                        log.info("group/%s/%s generation %d claims %s", self.group_id, self.member_id,
                                 self.generation_id, self.claims)
                        revoked = {t: gone for t, ps in owned.items()
                                   if (gone := [p for p in ps if p not in self.claims.get(t, ())])}
                        return Generation(join.generation_id, join.member_id, join.leader,
                                          join.protocol_name or "", dict(self.claims), plan, revoked, lost)
                    if (code == REBALANCE_IN_PROGRESS and join.leader and join.leader != join.member_id
                            and self.absent_leader.refused(join.generation_id, join.leader)):
                        await self._take_over(join.generation_id, join.leader)
                        continue
                if code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                if code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    self.generation_id = -1
                    self.claims = {}  # lost, not owned: the next join claims none of them
                    lost = True
                    immediate = True
                elif code in COORDINATOR_CODES:
                    self.cluster.forget_coordinator(self.group_id)
                    immediate = False
                else:
                    immediate = False
                error: Exception = BrokerError(code, f"group {self.group_id!r} join")
                if is_fatal(error):
                    raise error
            except (BrokerConnectionError, RequestTimedOutError, CoordinatorLost) as exc:
                self.cluster.forget_coordinator(self.group_id)
                error, immediate = exc, False
                if self.unanswered_since is None:
                    self.unanswered_since = time.monotonic()
            except KafkaError as exc:
                if is_fatal(exc):
                    raise
                error, immediate = exc, False
            if retries is not None:
                if retries <= 0:
                    raise error
                retries -= 1
            failures += 1
            log.log(logging.WARNING if failures in (1, 10, 100) else logging.INFO,
                    "group/%s join failed %d time(s), retrying: %s", self.group_id, failures, error)
            if not immediate:
                await self._sleep(self.backoff)

    async def _take_over(self, generation_id: int, leader: str) -> None:
        """Leave under this member's id and join next under the absent leader's (`AbsentLeader`)."""
        log.warning("group/%s: generation %d waits for leader %s, which has not assigned for over "
                    "session.timeout.ms=%d; it is gone (a broker that keeps a departed leader): %s takes over "
                    "its member id", self.group_id, generation_id, leader, self.session_timeout_ms, self.member_id)
        await self.leave()
        self.absent_leader.reset()
        self.member_id = leader

    async def _coordinator(self) -> Any:
        try:
            return await self.cluster.coordinator(self.group_id)
        except BrokerError as exc:
            if exc.code in COORDINATOR_CODES or exc.retriable:
                self.cluster.forget_coordinator(self.group_id)
                raise CoordinatorLost(str(exc)) from exc
            raise

    def _subscription(self) -> Subscription:
        return Subscription(self.topics, None, dict(self.claims), self.generation_id)

    async def _join_group(self) -> Any:
        conn = await self._coordinator()
        metadata = encode_subscription(self._subscription())
        body = {
            "group_id": self.group_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": a.name, "metadata": metadata} for a in self.assignors],
            "reason": None,
        }
        return await conn.request(messages.JOIN_GROUP, body,
                                  timeout=self.rebalance_timeout_ms / 1000 + 5)

    async def _balance(self, join: Any) -> dict[str, dict[str, list[int]]]:
        """The leader's part: everyone's subscription, the chosen strategy, one plan."""
        members: dict[str, Subscription] = {}
        for m in join.members:
            sub = decode_subscription(m.metadata)
            sub.group_instance_id = m.get("group_instance_id")
            members[m.member_id] = sub
        topics = sorted({t for s in members.values() for t in s.topics})
        await self.cluster.refresh_metadata(topics)
        partitions = {t: len(self.cluster.metadata.partitions(t)) for t in topics
                      if self.cluster.metadata.partitions(t)}
        assignor = next((a for a in self.assignors if a.name == join.protocol_name), None)
        if assignor is None:
            assignor = get_assignor(join.protocol_name)
        plan = assignor.assign(members, partitions)
        log.info("group/%s leader plan (%s, generation %d): %s", self.group_id, assignor.name,
                 join.generation_id, plan)
        return plan

    async def _sync_group(self, generation_id: int, protocol: str | None,
                          plan: dict[str, dict[str, list[int]]]) -> Any:
        conn = await self._coordinator()
        body = {
            "group_id": self.group_id,
            "generation_id": generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocol_name": protocol,
            "assignments": [{"member_id": m, "assignment": encode_assignment(c)} for m, c in plan.items()],
        }
        return await conn.request(messages.SYNC_GROUP, body, timeout=self.rebalance_timeout_ms / 1000 + 5)

    # -- the session's requests ---------------------------------------------

    def _check(self, code: int, what: str, generation_id: int | None = None) -> None:
        """Raise what `code` means for a request sent in `generation_id` (None: this one). An
        answer to a request of a generation the member has left since (a heartbeat in flight
        across a join) changes nothing here, and its `RebalanceNeeded` says it is stale."""
        if code == NONE:
            return
        stale = generation_id is not None and generation_id != self.generation_id
        log.debug("group/%s/%s %s (sent in generation %s, now %d) answered %s", self.group_id, self.member_id, what,
                  generation_id, self.generation_id, BrokerError(code).name)
        if code == UNKNOWN_MEMBER_ID and not stale:
            self.member_id = ""
            self.generation_id = -1
            self.claims = {}  # lost, not owned
        if code in REJOIN_CODES:
            raise RebalanceNeeded(code, f"group {self.group_id!r} {what}", stale)
        if code in COORDINATOR_CODES:
            self.cluster.forget_coordinator(self.group_id)
            raise CoordinatorLost(str(BrokerError(code, f"group {self.group_id!r} {what}")))
        raise BrokerError(code, f"group {self.group_id!r} {what}")

    async def heartbeat(self) -> None:
        """One heartbeat; raises `RebalanceNeeded` when the group wants a rejoin."""
        generation_id = self.generation_id
        try:
            conn = await self._coordinator()
            response = await conn.request(messages.HEARTBEAT, {
                "group_id": self.group_id, "generation_id": generation_id,
                "member_id": self.member_id, "group_instance_id": self.instance_id})
        except (BrokerConnectionError, RequestTimedOutError) as exc:
            self.cluster.forget_coordinator(self.group_id)
            raise CoordinatorLost(str(exc)) from exc
        self._check(response.error_code, "heartbeat", generation_id)

    async def commit(self, offsets: Mapping[tuple[str, int], int], retries: int = 3) -> None:
        """Commit next-offsets-to-consume for this generation; retried on coordinator moves."""
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""})
        generation_id = self.generation_id
        body = {"group_id": self.group_id, "generation_id_or_member_epoch": generation_id,
                "member_id": self.member_id, "group_instance_id": self.instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        while True:
            try:
                conn = await self._coordinator()
                response = await conn.request(messages.OFFSET_COMMIT, body)
                for t in response.topics:
                    for p in t.partitions:
                        self._check(p.error_code, f"commit {t.name}/{p.partition_index}", generation_id)
                log.debug("group/%s/%s committed in generation %d: %s", self.group_id, self.member_id, generation_id,
                          dict(offsets))
                return
            except (BrokerConnectionError, RequestTimedOutError, CoordinatorLost) as exc:
                self.cluster.forget_coordinator(self.group_id)
                if retries <= 0:
                    raise
                retries -= 1
                log.info("group/%s commit retry (%s)", self.group_id, exc)
                await self._sleep(self.backoff)

    async def fetch_offsets(self, claims: Mapping[str, Iterable[int]], retries: int = 3) -> dict[tuple[str, int], int]:
        """Committed offsets of `claims`; -1 where the group has none."""
        wanted = {t: sorted(ps) for t, ps in claims.items() if ps}
        if not wanted:
            return {}
        while True:
            try:
                conn = await self._coordinator()
                return await offset_fetch(conn, self.group_id, wanted, require_stable=True, check=self._check)
            except (BrokerConnectionError, RequestTimedOutError, CoordinatorLost):
                self.cluster.forget_coordinator(self.group_id)
                if retries <= 0:
                    raise
                retries -= 1
                await self._sleep(self.backoff)
            except BrokerError as exc:
                if exc.code not in (COORDINATOR_LOAD_IN_PROGRESS, UNSTABLE_OFFSET_COMMIT) or retries <= 0:
                    raise
                retries -= 1
                await self._sleep(self.backoff)

    async def leave(self) -> None:
        """Leave the group (a static member stays: its instance id keeps its claims for a restart)."""
        if not self.member_id or self.instance_id is not None:
            return
        try:
            conn = await self._coordinator()
            version = conn.version_for(messages.LEAVE_GROUP)
            body: dict[str, Any] = {"group_id": self.group_id, "member_id": self.member_id,
                                    "members": [{"member_id": self.member_id, "group_instance_id": None}]}
            response = await conn.request(messages.LEAVE_GROUP, body, version)
            if response.error_code and response.error_code != UNKNOWN_MEMBER_ID:
                log.warning("group/%s leave: %s", self.group_id, BrokerError(response.error_code))
        except (KafkaError, OSError) as exc:
            log.warning("group/%s leave failed: %s", self.group_id, exc)
        finally:
            self.member_id = ""
            self.generation_id = -1
            self.claims = {}


def _raise(group_id: str) -> Callable[[int, str], None]:
    def check(code: int, what: str) -> None:
        if code:
            raise BrokerError(code, f"offsets of group {group_id!r} {what}")
    return check


async def offset_fetch(conn: Any, group_id: str, topics: Mapping[str, list[int]] | None, *,
                       require_stable: bool = False,
                       check: Callable[[int, str], None] | None = None) -> dict[tuple[str, int], int]:
    """`group_id`'s committed offsets in `topics` (None: wherever it has any), asked of its
    coordinator `conn` (one OffsetFetch, at the version `conn` speaks): -1 where it has none.
    Every error code in the answer goes to `check(code, what)`, which raises (by default a
    `BrokerError` naming the group). The one OffsetFetch call of the group member
    (`GroupCoordinator.fetch_offsets`) and of `Admin.committed_offsets`."""
    check = check or _raise(group_id)
    version = conn.version_for(messages.OFFSET_FETCH)
    wanted = None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    if version >= 8:
        body: dict[str, Any] = {"groups": [{"group_id": group_id, "topics": wanted}], "require_stable": require_stable}
    else:
        body = {"group_id": group_id, "topics": wanted, "require_stable": require_stable}
    response = await conn.request(messages.OFFSET_FETCH, body, version)
    group = response.groups[0] if version >= 8 else response
    check(group.get("error_code", 0), "offset fetch")
    out = {}
    for t in group.topics:
        for p in t.partitions:
            check(p.error_code, f"offset fetch {t.name}/{p.partition_index}")
            out[(t.name, p.partition_index)] = p.committed_offset
    return out
