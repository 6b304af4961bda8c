"""`ConsumerGroup`: N member actors sharing a group's partitions, each running the handler.

    def handle(batch):            # a pyarrow.RecordBatch of one partition, in offset order
        ...
    group = ConsumerGroup({"bootstrap.servers": ..., "group.id": "g"}, ["events"], handle, members=3)
    group.scale(5)                # grow or shrink while running
    group.check()                 # raises ConsumerError if a member ended or a partition failed
    group.close()                 # every member commits, leaves; no actor stays

A topic name that starts with `^` is a pattern (`["^orders-.*"]`, librdkafka's rule,
wire/subscription.py): every topic whose whole name matches, looked up again every
`metadata.max.age.ms`; a topic that comes to match is read from `auto.offset.reset` (or its
committed offsets), one that goes away is dropped at the rebalance that follows.

The handler is a function of a batch (marked when it returns), or an object with
`setup(session)`, `consume_claim(session, claim)` (iterate `claim.batches()`, call
`session.mark(topic, partition, next_offset)` / `session.commit()`), and `cleanup(session)`,
as in Sarama. Consume-transform-produce: a handler that writes its output with a transactional
`Producer` commits the input's offsets in the same transaction instead of marking them,
`producer.send_offsets_to_transaction(offsets, md.group_id, generation_id=md.generation_id,
member_id=md.member_id, group_instance_id=md.group_instance_id)` with
`md = session.group_metadata()` (a `GroupMetadata`), and reads with `isolation.level=read_committed`. Offsets are committed every `auto.commit.interval.ms` when
`enable.auto.commit` (the default) and at the end of every session.

Members ride out broker outages: they reconnect (`reconnect.backoff.ms` growing to
`reconnect.backoff.max.ms`) and rejoin for as long as the group runs; a member whose session
expired meanwhile resumes from its last commit, so what it processed after that comes again.
A member ends only on a fatal error (authentication, authorization, FENCED_INSTANCE_ID, a config
the broker refuses) or when its handler failed `max_handler_failures` times in a row (each
failure ends the session and the unmarked batches come again). A partition whose data cannot be
read (a corrupt batch, an offset out of range with `auto.offset.reset=none`) ends alone: the
member's other partitions go on. `errors()` lists all of these, `check()` raises them.
`close()` stops every member within a bound (a member's `rebalance.timeout.ms` for its handlers
plus a few requests), kills what did not stop or is dead, and reports each member's end.

A group may size itself by lag: `members=(min, max)` starts `min` members and a scaler thread
grows the group when its lag (records its handlers have not marked yet) stays above
`lag_per_member` a member for `grow_after_s`, and shrinks it by one when every member has
stayed idle for `shrink_after_s`: never beyond `max` nor the partition count
(driver/group_scaling.py has the rule). Unless the config names a strategy, such a group uses
`cooperative-sticky`, so that scaling moves only the partitions that must move. `scalings`
lists each change, with when and why.

A member that dies (its process crashed, its node was lost) is noticed by the group itself: a
supervisor thread holds a `watch` call open on every member, and when one fails because its
actor died, a new member takes the dead one's slot. With `group.instance.id` (static
membership) the new member has the same instance id (`<id>-<slot>`), so the coordinator hands
it the dead member's claims without a rebalance; without it the group rebalances once the
coordinator expires the dead member (`session.timeout.ms`). Each replacement is in `errors()`
as kind "replaced" (not an error `check()` raises); the replacement resumes from the committed
offsets, so what the dead member processed after its last commit comes again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import ray

from ..actors.group_member import GroupMember
from ..actors.group_member_state import MAX_HANDLER_FAILURES, MemberError, stop_bound
from ..actors.group_session import GroupMetadata
from ..actors.metrics import Reports
from ..actors.options import remote_class
from ..wire.config import Config, parse_config
from ..wire.errors import ConsumerError
from ..wire.subscription import TopicSubscription
from .group_scaling import SCALE_CHECK_S, LagScaling
from .ray_runtime import ensure_ray

__all__ = ["ConsumerGroup", "GroupMetadata"]

log = logging.getLogger("raykafka.driver.consumer_group")

STATUS_TIMEOUT = 30.0  # seconds a member may take to answer `status`
MEMBER_START_TIMEOUT = 300.0  # seconds new members may take to start (placed, process up, answering)
WATCH_POLL = 0.5  # seconds between the supervisor's looks at the set of members it watches


class Scaled(NamedTuple):
    """One change of a group that sizes itself by lag."""

    at: float  # time.time()
    before: int
    after: int
    lag: int


class ConsumerGroup:
    def __init__(self, config: Mapping[str, Any], topics: list[str] | str, handler: Any,
                 members: int | tuple[int, int] = 1, max_handler_failures: int = MAX_HANDLER_FAILURES,
                 stats_cb: Callable[[dict], Any] | None = None, lag_per_member: int | None = None,
                 grow_after_s: float | None = None, shrink_after_s: float | None = None):
        self.scaling: LagScaling | None = None
        if isinstance(members, tuple):
            bounds = {k: v for k, v in (("lag_per_member", lag_per_member), ("grow_after_s", grow_after_s),
                                        ("shrink_after_s", shrink_after_s)) if v is not None}
            self.scaling = LagScaling(*members, **bounds)
            if "partition.assignment.strategy" not in config:  # scaling moves only what must move
                config = {**config, "partition.assignment.strategy": "cooperative-sticky"}
            members = self.scaling.lo
        elif lag_per_member is not None or grow_after_s is not None or shrink_after_s is not None:
            raise ValueError("lag_per_member, grow_after_s, shrink_after_s: only for a group sized by lag, "
                             "members=(min, max)")
        self.config = parse_config(config, role="group")  # its repr hides the passwords; the members get it
        self.reports = Reports(self.config["group.id"] or "", "consumer_group", self.config, stats_cb,
                               lambda: [s.get("metrics", {}) for s in [*self.ended.values(), *self.status()]])
        if not self.config["group.id"]:
            raise ValueError("group.id: required for a consumer group")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise ValueError("topics: a consumer group needs at least one topic")
        TopicSubscription.of(self.topics)  # a pattern that is no regular expression fails here
        if not (hasattr(handler, "consume_claim") or callable(handler)):
            raise TypeError(f"handler: expected a function of a batch or an object with consume_claim, got {handler!r}")
        if members < 0:
            raise ValueError(f"members: must be at least 0, got {members}")
        if max_handler_failures < 1:
            raise ValueError(f"max_handler_failures: must be at least 1, got {max_handler_failures}")
        self.handler = handler
        self.max_handler_failures = max_handler_failures
        ensure_ray()
        self._lock = threading.RLock()  # members, slots and watches: the caller's thread and the supervisor's
        self._members: list[Any] = []
        self._slot: dict[Any, int] = {}  # member handle -> its slot number, for naming it in errors
        self._next_index = 0
        self._watches: dict[Any, Any] = {}  # a member's open `watch` call -> the member
        self.replaced: list[MemberError] = []  # members that died and were replaced, with when and why
        self.ended: dict[int, dict[str, Any]] = {}  # slot -> the final status of a member stopped or dead
        self._closing = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="raykafka-group-supervisor", daemon=True)
        self.scalings: list[Scaled] = []  # what the scaler did (members=(min, max))
        self._scaler = threading.Thread(target=self._scale_by_lag, name="raykafka-group-scaler", daemon=True)
        self.scale(members)
        self._supervisor.start()
        if self.scaling is not None:
            self._scaler.start()
        self.reports.start()

    def _member_config(self, slot: int) -> Config:
        config = Config(self.config)
        instance = self.config["group.instance.id"]
        if instance is not None:  # static membership: one stable instance id per member slot
            config["group.instance.id"] = f"{instance}-{slot}"
        return config

    def _start_member(self, slot: int) -> Any:
        member = remote_class(GroupMember, "group_member").remote(
            self._member_config(slot), self.topics, self.handler, self.max_handler_failures)
        self._slot[member] = slot
        self._watches[member.watch.remote()] = member
        return member

    # -- the supervisor ----------------------------------------------------------

    def _supervise(self) -> None:
        """Until `close`: wait for any member's `watch` to end; one that failed because its actor
        died is replaced in its slot."""
        while not self._closing.is_set():
            with self._lock:
                refs = list(self._watches)
            if not refs:
                self._closing.wait(WATCH_POLL)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=WATCH_POLL)
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._replace(ref, exc)
                except Exception:  # noqa: BLE001 - the member's own end is in its status
                    log.exception("consumer group %s: watching a member failed", self.config["group.id"])
                with self._lock:
                    self._watches.pop(ref, None)

    def _replace(self, ref: Any, died: BaseException) -> None:
        with self._lock:
            dead = self._watches.pop(ref, None)
            if dead is None or dead not in self._members or self._closing.is_set():
                return  # stopped on purpose, or the group is closing
            slot = self._slot[dead]
            cause = str(died).strip().splitlines()[-1][:300] if str(died).strip() else type(died).__name__
            log.warning("consumer group %s member %d died (%s): replacing it", self.config["group.id"], slot, cause)
            self.replaced.append(MemberError("replaced", f"member {slot}", f"died: {cause}; replaced"))
            self._members[self._members.index(dead)] = self._start_member(slot)
        ray.kill(dead)

    # -- the scaler (members=(min, max)) -----------------------------------------------

    def _scale_by_lag(self) -> None:
        """Until `close`: every SCALE_CHECK_S, the group's lag to `LagScaling.decide`, and the
        size it asks for to `scale`."""
        assert self.scaling is not None
        last_claimed: set[tuple[str, int]] | None = None
        while not self._closing.wait(SCALE_CHECK_S):
            try:
                statuses = [s for s in self.status() if not s.get("fatal")]  # an ended member holds nothing
                claimed = {(t, p) for s in statuses for t, ps in s["claims"].items() for p in ps}
                # settled: one generation, nobody joining, the same claims as a look ago (so a partition
                # withheld for a round, or a topic gone, does not pass for the partitions there are)
                settled = (len({s["generation_id"] for s in statuses}) == 1 and claimed == last_claimed
                           and not any(s.get("joining") for s in statuses))
                last_claimed = claimed
                lag = sum(s.get("lag", 0) for s in statuses)
                wanted = self.scaling.decide(time.monotonic(), lag, len(statuses), len(claimed), settled)
                if wanted is not None and not self._closing.is_set():
                    log.info("consumer group %s: lag %d with %d members: scaling to %d", self.config["group.id"],
                             lag, len(statuses), wanted)
                    self.scalings.append(Scaled(time.time(), len(statuses), wanted, lag))
                    self.scale(wanted)
                    last_claimed = None
            except Exception:  # noqa: BLE001 - the scaler goes on; the members' own errors are in errors()
                log.exception("consumer group %s: scaling by lag failed", self.config["group.id"])

    @property
    def members(self) -> list[Any]:
        return list(self._members)

    def scale(self, n: int) -> None:
        """Grow or shrink to `n` members; a leaving member commits and leaves the group first."""
        if n < 0:
            raise ValueError(f"members: must be at least 0, got {n}")
        with self._lock:
            if self._closing.is_set():  # the scaler's last call, racing close(): close stops them all
                return
            new = []
            while len(self._members) < n:
                member = self._start_member(self._next_index)
                self._next_index += 1
                self._members.append(member)
                new.append(member)
            leaving = self._members[n:]
            self._members = self._members[:n]
        if new:
            try:
                ray.get([m.ping.remote() for m in new], timeout=MEMBER_START_TIMEOUT)
            except ray.exceptions.GetTimeoutError:
                raise ConsumerError(f"{len(new)} new member(s) did not start within {MEMBER_START_TIMEOUT:.0f}s "
                                    f"(the Ray cluster has no room for them?)") from None
        self._stop(leaving)

    def _name(self, member: Any) -> str:
        return f"member {self._slot.get(member, '?')}"

    def _stop(self, members: list[Any]) -> list[dict[str, Any]]:
        """Stop `members` together, each within its bound; then kill every one of them (stopped,
        dead or overdue) and return how each ended."""
        if not members:
            return []
        bound = stop_bound(self.config) + 10
        refs = {m.stop.remote(): m for m in members}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=bound)
        results = []
        for ref, member in refs.items():
            if ref in ready:
                result = self._answer(member, ref)
            else:
                result = _ended(self._name(member), f"did not stop within {bound:.0f}s: killed")
                log.warning("consumer group %s %s", self.config["group.id"], result["fatal"])
            ray.kill(member)
            self.ended[self._slot.get(member, -1)] = result
            results.append(result)
        return results

    def _answer(self, member: Any, ref: Any) -> dict[str, Any]:
        """A member's answer, or what is known of it when it is dead."""
        try:
            return ray.get(ref, timeout=STATUS_TIMEOUT)
        except ray.exceptions.RayActorError as exc:
            cause = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
            log.warning("consumer group %s %s is dead: %s", self.config["group.id"], self._name(member), cause)
            return _ended(self._name(member), f"died: {cause}")
        except ray.exceptions.GetTimeoutError:
            return _ended(self._name(member), f"did not answer within {STATUS_TIMEOUT:.0f}s", fatal=False)

    def status(self) -> list[dict[str, Any]]:
        """Each running member's status; a dead one says so in `fatal` (and has no claims)."""
        with self._lock:
            members = list(self._members)
        refs = [(m, m.status.remote()) for m in members]
        return [self._answer(m, ref) for m, ref in refs]

    def assignment(self) -> dict[str, dict[str, list[int]]]:
        """Each member's claims in its current generation, by member id."""
        return {s["member_id"]: s["claims"] for s in self.status() if s["member_id"]}

    def errors(self) -> list[MemberError]:
        """Every error a member met, running or ended: failed partitions, handler failures, and
        what ended a member (a fatal error, its death), each naming where and why."""
        out = list(self.replaced)
        with self._lock:
            members = list(self._members)
        running = [(self._slot.get(m, -1), s) for m, s in zip(members, self.status(), strict=True)]
        for slot, s in [*self.ended.items(), *running]:
            for e in map(MemberError._make, s.get("errors", [])):
                out.append(e._replace(where=f"member {slot}" + ("" if e.where == "member" else f" {e.where}")))
        return out

    def check(self) -> None:
        """Raise `ConsumerError` naming every member that ended and every partition that failed."""
        bad = [e for e in self.errors() if e.kind in ("fatal", "partition")]
        if bad:
            raise ConsumerError("; ".join(f"{e.where}: {e.cause}" for e in bad))

    def forget(self, member: Any) -> None:
        """Drop a member from the group's list without stopping it (no longer needed for a dead
        member: the group replaces it by itself)."""
        with self._lock:
            self._members = [m for m in self._members if m != member]

    def close(self) -> list[dict[str, Any]]:
        """Stop every member (commit, leave), kill every member actor, dead or alive; return each
        member's final status (`fatal` says why one ended otherwise, e.g. that it had died)."""
        self._closing.set()
        if self._scaler.is_alive():  # it may be stopping members it scaled away
            self._scaler.join(stop_bound(self.config) + 10 + STATUS_TIMEOUT)
        if self._supervisor.is_alive():
            self._supervisor.join(WATCH_POLL * 4 + STATUS_TIMEOUT)
        with self._lock:
            members, self._members = self._members, []
        try:
            return self._stop(members)
        finally:
            self.reports.close()  # the last report: every member's figures as it stopped

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ended(name: str, cause: str, fatal: bool = True) -> dict[str, Any]:
    """The status of a member that cannot give its own."""
    return {"member_id": "", "generation_id": -1, "claims": {}, "generations": 0, "fetched_batches": 0,
            "heartbeats": 0, "error": f"{name} {cause}", "fatal": f"{name} {cause}" if fatal else None,
            "errors": [MemberError("fatal" if fatal else "unanswered", "member", cause)], "failed_partitions": {},
            "committed": {}, "last_end_reason": cause, "revoked": 0, "joining": False, "lag": 0}
