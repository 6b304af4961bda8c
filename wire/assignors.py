"""Group assignors (range, roundrobin, sticky, cooperative-sticky) and the standard "consumer"
protocol bytes.

The elected group leader decodes every member's subscription, runs the strategy the group
agreed on, and encodes one assignment per member. The bytes are Kafka's own consumer
protocol (an int16 version, then `messages.CONSUMER_PROTOCOL_SUBSCRIPTION`/`_ASSIGNMENT`),
so Java and librdkafka members can share a group with ours and either side may lead.

A strategy maps `{member_id: Subscription}` and `{topic: partition count}` to
`{member_id: {topic: [partitions]}}`; every subscribed partition lands exactly once, except
under the cooperative protocol (KIP-429): there a partition that must move from the member that
owns it is given to nobody in that round. Its owner sees it missing, gives it up and joins again
at once; the next round gives it to its new member. The partitions that stay are never revoked.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import messages
from .errors import DecodeError

_VERSION = struct.Struct(">h")
SUBSCRIPTION_VERSION = 3  # what we write: topics, user data, owned partitions, generation, rack
ASSIGNMENT_VERSION = 0  # every reader of any age decodes it
_SUB_MAX = 3
_ASSIGN_MAX = 3

Claims = dict[str, list[int]]


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: Claims = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None  # from JoinGroup, not from the bytes


@dataclass
class Assignment:
    partitions: Claims
    user_data: bytes | None = None


# ---------------------------------------------------------------------------- protocol bytes


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    body = {
        "topics": list(sub.topics),
        "user_data": sub.user_data,
        "owned_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(sub.owned_partitions.items())],
        "generation_id": sub.generation_id,
        "rack_id": sub.rack_id,
    }
    return _VERSION.pack(version) + messages.CONSUMER_PROTOCOL_SUBSCRIPTION.encode(version, body)


def decode_subscription(data: bytes) -> Subscription:
    """A member's subscription; versions above what we know are read as our newest (fields append)."""
    version = _read_version(data, "subscription")
    body = messages.CONSUMER_PROTOCOL_SUBSCRIPTION.decode(min(version, _SUB_MAX), data, 2, exact=False)
    owned: Claims = {}
    for item in body.owned_partitions:
        owned.setdefault(item.topic, []).extend(item.partitions)
    return Subscription(list(body.topics), body.user_data, owned, body.generation_id, body.rack_id)


def encode_assignment(assignment: Assignment | Claims, version: int = ASSIGNMENT_VERSION) -> bytes:
    if not isinstance(assignment, Assignment):
        assignment = Assignment(assignment)
    body = {
        "assigned_partitions": [{"topic": t, "partitions": sorted(ps)}
                                for t, ps in sorted(assignment.partitions.items())],
        "user_data": assignment.user_data,
    }
    return _VERSION.pack(version) + messages.CONSUMER_PROTOCOL_ASSIGNMENT.encode(version, body)


def decode_assignment(data: bytes | None) -> Assignment:
    """A member's assignment from SyncGroup; empty bytes mean no partitions."""
    if not data:
        return Assignment({})
    version = _read_version(data, "assignment")
    body = messages.CONSUMER_PROTOCOL_ASSIGNMENT.decode(min(version, _ASSIGN_MAX), data, 2, exact=False)
    claims: Claims = {}
    for item in body.assigned_partitions:
        claims.setdefault(item.topic, []).extend(item.partitions)
    for ps in claims.values():
        ps.sort()
    return Assignment(claims, body.user_data)


def _read_version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise DecodeError(f"consumer protocol {what} of {len(data)} bytes has no version")
    version = _VERSION.unpack_from(data, 0)[0]
    if version < 0:
        raise DecodeError(f"consumer protocol {what} has version {version}")
    return version


# ---------------------------------------------------------------------------- strategies


class Assignor:
    name = ""
    cooperative = False  # KIP-429: members keep what stays theirs across a rebalance

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> dict[str, Claims]:
        raise NotImplementedError

    def subscription_user_data(self, claims: Claims, generation_id: int) -> bytes | None:
        return None


def _member_order(members: Mapping[str, Subscription]) -> list[str]:
    """Static members first by instance id, then dynamic ones by member id (as Kafka's range does)."""
    return sorted(members, key=lambda m: (members[m].group_instance_id is None,
                                          members[m].group_instance_id or "", m))


def _empty(members: Iterable[str]) -> dict[str, Claims]:
    return {m: {} for m in members}


class RangeAssignor(Assignor):
    """Per topic: consecutive ranges, the first (n % m) members one partition more."""

    name = "range"

    def assign(self, members, partitions):
        out = _empty(members)
        order = _member_order(members)
        for topic in sorted(partitions):
            subscribers = [m for m in order if topic in members[m].topics]
            if not subscribers:
                continue
            n = partitions[topic]
            per, extra = divmod(n, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                count = per + (1 if i < extra else 0)
                if count:
                    out[member][topic] = list(range(start, start + count))
                start += count
        return out


class RoundRobinAssignor(Assignor):
    """All partitions sorted by topic then number, dealt in turn to the members subscribed."""

    name = "roundrobin"

    def assign(self, members, partitions):
        out = _empty(members)
        order = _member_order(members)
        if not order:
            return out
        i = 0
        for topic in sorted(partitions):
            for p in range(partitions[topic]):
                for _ in range(len(order)):
                    member = order[i % len(order)]
                    i += 1
                    if topic in members[member].topics:
                        out[member].setdefault(topic, []).append(p)
                        break
        return out


def owners(members: Mapping[str, Subscription], partitions: Mapping[str, int],
           subscribed_only: bool = True) -> dict[tuple[str, int], str]:
    """Who owns each partition by the members' subscriptions: a partition that still exists (of
    a topic the member still subscribes to, unless not `subscribed_only`); the newest generation
    wins a dispute."""
    valid = {(t, p) for t, n in partitions.items() for p in range(n)}
    owner: dict[tuple[str, int], tuple[int, str]] = {}
    for m in sorted(members):
        sub = members[m]
        for topic, ps in sub.owned_partitions.items():
            if subscribed_only and topic not in sub.topics:
                continue
            for p in ps:
                tp = (topic, p)
                if tp in valid and (tp not in owner or owner[tp][0] < sub.generation_id):
                    owner[tp] = (sub.generation_id, m)
    return {tp: m for tp, (_, m) in owner.items()}


class StickyAssignor(Assignor):
    """Keep what each member owned (newest generation wins a dispute), then balance.

    Balanced means no member holds two partitions more than another member that could take
    one of them. Moves only happen to reach that balance.
    """

    name = "sticky"

    def assign(self, members, partitions):
        valid = {(t, p) for t, n in partitions.items() for p in range(n)}
        held: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
        owned = owners(members, partitions)
        for tp, m in owned.items():
            held[m].add(tp)
        eligible = {tp: [m for m in members if tp[0] in members[m].topics] for tp in sorted(valid)}
        # what nobody keeps goes to the least loaded member that can take it
        for tp, candidates in eligible.items():
            if tp in owned or not candidates:
                continue
            target = min(candidates, key=lambda m: (len(held[m]), m))
            held[target].add(tp)
        # move one partition at a time from the most to the least loaded until balanced
        while True:
            moved = False
            for giver in sorted(held, key=lambda m: (-len(held[m]), m)):
                best = None
                for tp in sorted(held[giver]):
                    for taker in eligible[tp]:
                        if len(held[giver]) - len(held[taker]) >= 2 and (best is None or len(held[taker]) < len(held[best[1]])):
                            best = (tp, taker)
                if best is not None:
                    held[giver].discard(best[0])
                    held[best[1]].add(best[0])
                    moved = True
                    break
            if not moved:
                break
        out = _empty(members)
        for m, tps in held.items():
            for topic, p in sorted(tps):
                out[m].setdefault(topic, []).append(p)
        return out


class CooperativeStickyAssignor(StickyAssignor):
    """The sticky plan under the cooperative protocol (KIP-429): a partition the plan moves away
    from its owner goes to nobody this round. The owner, seeing it missing from its assignment,
    revokes it alone and joins again; the next round finds it unowned and gives it out."""

    name = "cooperative-sticky"
    cooperative = True

    def assign(self, members, partitions):
        plan = super().assign(members, partitions)
        owner = owners(members, partitions, subscribed_only=False)  # held back until given up, whatever the reason
        return {m: {t: kept for t, ps in claims.items()
                    if (kept := [p for p in ps if owner.get((t, p), m) == m])}
                for m, claims in plan.items()}


ASSIGNORS: dict[str, type[Assignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def get_assignor(name: str) -> Assignor:
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"partition.assignment.strategy: unknown assignor {name!r}") from None


def group_members(claims_by_member: Mapping[str, Claims]) -> dict[tuple[str, int], list[str]]:
    """Who holds each partition: the check that nothing is held twice or left out."""
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    for member, claims in claims_by_member.items():
        for topic, ps in claims.items():
            for p in ps:
                holders[(topic, p)].append(member)
    return dict(holders)
