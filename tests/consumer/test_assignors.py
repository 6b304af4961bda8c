"""Assignors: every partition exactly once, balanced, sticky; and the consumer protocol bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raykafka.wire.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    group_members,
)

ASSIGNORS = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()]


def _s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_subscription_v0_golden_bytes():
    expected = (
        b"\x00\x00"                      # version 0
        + b"\x00\x00\x00\x02"            # topics: 2
        + _s16("a") + _s16("bc")
        + b"\xff\xff\xff\xff"            # user_data: null
    )
    assert encode_subscription(Subscription(["a", "bc"]), version=0) == expected
    assert decode_subscription(expected).topics == ["a", "bc"]


def test_subscription_v1_golden_bytes():
    expected = (
        b"\x00\x01"                      # version 1
        + b"\x00\x00\x00\x01" + _s16("t")  # topics: ["t"]
        + b"\x00\x00\x00\x03abc"         # user_data: b"abc"
        + b"\x00\x00\x00\x01"            # owned_partitions: 1 topic
        + _s16("t") + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02"  # t: [0, 2]
    )
    sub = Subscription(["t"], b"abc", {"t": [2, 0]})
    assert encode_subscription(sub, version=1) == expected
    back = decode_subscription(expected)
    assert (back.topics, back.user_data, back.owned_partitions) == (["t"], b"abc", {"t": [0, 2]})


def test_subscription_from_a_newer_version_reads_known_fields():
    data = bytearray(encode_subscription(Subscription(["x"], None, {"x": [1]}, 7, "r1"), version=3))
    data[0:2] = b"\x00\x09"  # a future version appends fields; ours stay readable
    back = decode_subscription(bytes(data) + b"\x00\x00extra")
    assert (back.topics, back.owned_partitions, back.generation_id, back.rack_id) == (["x"], {"x": [1]}, 7, "r1")


def test_assignment_golden_bytes_and_roundtrip():
    expected = (b"\x00\x00" + b"\x00\x00\x00\x01" + _s16("t") + b"\x00\x00\x00\x02"
                + b"\x00\x00\x00\x01\x00\x00\x00\x03" + b"\xff\xff\xff\xff")
    assert encode_assignment({"t": [3, 1]}) == expected
    assert decode_assignment(expected).partitions == {"t": [1, 3]}
    assert decode_assignment(b"").partitions == {}
    assert decode_assignment(encode_assignment(Assignment({"a": [0]}, b"u"), version=3)).user_data == b"u"


def test_range_follows_kafka_layout():
    members = {m: Subscription(["t"]) for m in ("c", "a", "b")}
    plan = RangeAssignor().assign(members, {"t": 7})
    assert plan == {"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4]}, "c": {"t": [5, 6]}}


def test_roundrobin_deals_in_turn_across_topics():
    members = {"a": Subscription(["t", "u"]), "b": Subscription(["t", "u"])}
    plan = RoundRobinAssignor().assign(members, {"t": 3, "u": 2})
    assert plan == {"a": {"t": [0, 2], "u": [1]}, "b": {"t": [1], "u": [0]}}


def _check_complete_and_balanced(plan, members, partitions, balanced=True):
    holders = group_members(plan)
    wanted = {(t, p) for t, n in partitions.items() for p in range(n)
              if any(t in s.topics for s in members.values())}
    assert set(holders) == wanted, "every subscribed partition is assigned"
    assert all(len(h) == 1 for h in holders.values()), "no partition is held twice"
    for member, claims in plan.items():
        assert all(t in members[member].topics for t in claims), "only subscribed topics"
    if balanced:
        counts = [sum(len(ps) for ps in plan[m].values()) for m in members]
        assert max(counts) - min(counts) <= 1


@settings(max_examples=60, deadline=None)
@given(n_members=st.integers(1, 7), parts=st.lists(st.integers(1, 9), min_size=1, max_size=4))
def test_every_partition_once_and_balanced_for_one_subscription(n_members, parts):
    partitions = {f"t{i}": n for i, n in enumerate(parts)}
    members = {f"m{i}": Subscription(sorted(partitions)) for i in range(n_members)}
    for assignor in (RoundRobinAssignor(), StickyAssignor()):
        _check_complete_and_balanced(assignor.assign(members, partitions), members, partitions)
    # range balances per topic, not overall
    plan = RangeAssignor().assign(members, partitions)
    _check_complete_and_balanced(plan, members, partitions, balanced=len(parts) == 1)


@settings(max_examples=40, deadline=None)
@given(subs=st.lists(st.sets(st.sampled_from(["a", "b", "c"]), min_size=1), min_size=1, max_size=5))
def test_every_partition_once_with_mixed_subscriptions(subs):
    partitions = {"a": 4, "b": 3, "c": 5}
    members = {f"m{i}": Subscription(sorted(s)) for i, s in enumerate(subs)}
    for assignor in ASSIGNORS:
        _check_complete_and_balanced(assignor.assign(members, partitions), members, partitions, balanced=False)


def test_sticky_keeps_prior_assignments_when_a_member_joins():
    partitions = {"t": 6}
    first = StickyAssignor().assign({"a": Subscription(["t"]), "b": Subscription(["t"])}, partitions)
    members = {m: Subscription(["t"], None, first[m], 1) for m in ("a", "b")}
    members["c"] = Subscription(["t"])
    second = StickyAssignor().assign(members, partitions)
    _check_complete_and_balanced(second, members, partitions)
    kept = sum(len(set(second[m]["t"]) & set(first[m]["t"])) for m in ("a", "b"))
    assert kept == 4, "only the two partitions the newcomer needs move"


def test_sticky_keeps_prior_assignments_when_a_member_leaves():
    members = {"a": Subscription(["t"], None, {"t": [0, 1]}, 3), "b": Subscription(["t"], None, {"t": [2, 3]}, 3)}
    plan = StickyAssignor().assign(members, {"t": 6})  # c (which held 4, 5) left
    assert set(plan["a"]["t"]) >= {0, 1} and set(plan["b"]["t"]) >= {2, 3}
    _check_complete_and_balanced(plan, members, {"t": 6})


def test_sticky_newer_generation_wins_a_disputed_partition():
    members = {"a": Subscription(["t"], None, {"t": [0]}, 1), "b": Subscription(["t"], None, {"t": [0]}, 2)}
    plan = StickyAssignor().assign(members, {"t": 2})
    assert plan["b"]["t"] == [0] and plan["a"]["t"] == [1]


def _cooperative_rounds(owned: dict[str, dict[str, list[int]]], joining: list[str], partitions: dict[str, int],
                        generation: int = 1) -> tuple[dict, dict]:
    """Two rounds of the cooperative protocol: the first with the owners' claims and the newcomers,
    the second after every member gave up what the first left out of its assignment."""
    members = {m: Subscription(["t"], None, claims, generation) for m, claims in owned.items()}
    members.update({m: Subscription(["t"]) for m in joining})
    first = CooperativeStickyAssignor().assign(members, partitions)
    members = {m: Subscription(["t"], None, first[m], generation + 1) for m in members}
    return first, CooperativeStickyAssignor().assign(members, partitions)


def test_cooperative_withholds_what_moves_until_its_owner_gives_it_up():
    first, second = _cooperative_rounds({"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4, 5]}}, ["c"], {"t": 6})
    # round one: a and b keep 2 each; the 2 partitions moving to c go to nobody yet
    assert sorted(len(first[m].get("t", [])) for m in ("a", "b")) == [2, 2] and first["c"] == {}
    assert set(first["a"]["t"]) <= {0, 1, 2} and set(first["b"]["t"]) <= {3, 4, 5}, "nothing moves between owners"
    # round two: c gets them; a and b keep what round one left them
    assert len(second["c"]["t"]) == 2 and second["a"] == first["a"] and second["b"] == first["b"]
    _check_complete_and_balanced(second, {m: Subscription(["t"]) for m in "abc"}, {"t": 6})


def test_cooperative_gives_a_departed_members_partitions_at_once():
    first, _ = _cooperative_rounds({"a": {"t": [0, 1]}, "b": {"t": [2, 3]}}, [], {"t": 6})  # c (4, 5) left
    assert set(first["a"]["t"]) >= {0, 1} and set(first["b"]["t"]) >= {2, 3}
    _check_complete_and_balanced(first, {m: Subscription(["t"]) for m in "ab"}, {"t": 6})


def test_cooperative_newer_generation_decides_who_owns_a_disputed_partition():
    members = {"a": Subscription(["t"], None, {"t": [0]}, 1), "b": Subscription(["t"], None, {"t": [0, 1]}, 2)}
    plan = CooperativeStickyAssignor().assign(members, {"t": 2})
    # b owns both (its generation is newer than a's claim on 0); one of them moves to a, so this
    # round a gets nothing and b keeps the other
    assert plan["a"] == {} and len(plan["b"]["t"]) == 1, plan
    assert CooperativeStickyAssignor.cooperative and not StickyAssignor.cooperative


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=lambda a: a.name)
def test_partition_growth_is_picked_up(assignor):
    members = {"a": Subscription(["t"], None, {"t": [0]}, 1), "b": Subscription(["t"], None, {"t": [1]}, 1)}
    plan = assignor.assign(members, {"t": 4})
    _check_complete_and_balanced(plan, members, {"t": 4})


def test_cooperative_holds_back_what_its_owner_no_longer_subscribes_to_until_given_up():
    members = {"a": Subscription(["t"], None, {"t": [0], "u": [0]}, 2), "b": Subscription(["t", "u"], None, {}, -1)}
    plan = CooperativeStickyAssignor().assign(members, {"t": 1, "u": 1})
    assert "u" not in plan["b"], "u/0 waits for a, still reading it, to give it up"
