"""`raykafka group describe` on a live group whose broker sends no member assignments (tansu):
every partition of each topic a member subscribes to is shown, with its committed offset, end
and lag, beside those the group has committed offsets in. No broker: an Admin stand-in."""

from __future__ import annotations

from raykafka.app import cli_group
from raykafka.wire.admin import GroupDescription, MemberDescription, PartitionOffsets


class Admin:
    """What `_describe` asks of an Admin: the group, and offsets of the partitions it names."""

    def __init__(self, group: GroupDescription, committed: dict[tuple[str, int], int], partitions: dict[str, int]):
        self.group, self.committed, self.partitions = group, committed, partitions
        self.asked: list[dict | None] = []

    def require_group(self, group_id: str) -> GroupDescription:
        return self.group

    def group_offsets(self, group_id: str, wanted: dict | None = None) -> list[PartitionOffsets]:
        self.asked.append(wanted)
        keys = sorted(self.committed) if wanted is None else sorted(
            (t, p) for t, ps in wanted.items() for p in (range(self.partitions[t]) if ps is None else ps))
        return [PartitionOffsets(t, p, self.committed.get((t, p)), 0, 10) for t, p in keys]


def member(topics: tuple[str, ...], assignment: dict[str, tuple[int, ...]]) -> MemberDescription:
    return MemberDescription("m-1", None, "rk", "/10.0.0.1", topics, assignment)


def test_a_subscribed_topic_with_no_assignment_shows_every_partition_with_its_lag(capsys):
    group = GroupDescription("g", "Stable", "consumer", "range", (member(("orders", "audit"), {"audit": (0,)}),), 0)
    admin = Admin(group, {("orders", 1): 4, ("audit", 0): 7}, {"orders": 3, "audit": 2})
    cli_group._describe(admin, "g", "text")
    assert admin.asked[-1] == {"audit": [0], "orders": None}  # orders: every partition; audit: the assigned one
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[1], r[2], r[3], r[5]) for r in rows] == [
        ("audit", "0", "7", "3"), ("orders", "0", "-", "-"), ("orders", "1", "4", "6"), ("orders", "2", "-", "-")]


def test_an_assigned_group_shows_only_what_it_holds_and_has_committed(capsys):
    group = GroupDescription("g", "Stable", "consumer", "range", (member(("orders",), {"orders": (0, 1)}),), 0)
    admin = Admin(group, {("orders", 0): 2}, {"orders": 3})
    cli_group._describe(admin, "g", "text")
    assert admin.asked[-1] == {"orders": [0, 1]}
