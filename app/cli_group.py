"""`raykafka group`: consumer groups and their offsets, as kafka-consumer-groups shows and fixes them.

    raykafka group list -b HOST:PORT [-f text|json]
    raykafka group describe GROUP... -b HOST:PORT [-f text|json]
    raykafka group delete GROUP... -b HOST:PORT [--if-exists]
    raykafka group reset-offsets GROUP... -b HOST:PORT (-t TOPIC[:P,P...]... | --all-topics)
        (--to-earliest | --to-latest | --to-datetime ISO-8601 | --to-offset N) [--dry-run | --execute]

Everything goes through `Admin` (driver/admin.py; no Ray). `describe` prints a row per partition
the group has committed offsets in, has assigned, or consumes by a member's subscription that
names no assignment (tansu sends none): the committed offset, the log's end and the
lag, and the member holding it, as kafka-consumer-groups' CURRENT-OFFSET, LOG-END-OFFSET, LAG,
CONSUMER-ID, HOST and CLIENT-ID; its state line goes to stderr. `reset-offsets` prints the offsets
it would commit and commits nothing unless `--execute` is given (kafka-consumer-groups' dry run);
`-t TOPIC` means every partition of TOPIC, `-t TOPIC:0,2` those partitions, `--all-topics` every
partition the group has committed offsets in. A `--to-datetime` without a zone is local time.
Resetting, and deleting a group, are refused while the group has members (EXIT_ERROR, naming
its state): stop its consumers first. Describing or deleting a group that does not exist is
EXIT_ERROR too (`delete --if-exists` excepted). `list` and `describe` name a group's state alike
(`Admin.list_groups` asks the coordinator where a listing names none).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..wire.admin import GroupDescription, PartitionOffsets
from .args import EXIT_OK, UsageError, add_client_options, client_config, counted


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("group", help="list, describe or delete consumer groups; reset their offsets")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="list the groups with their states")
    listing.set_defaults(groups=[])
    describe = actions.add_parser("describe", help="each partition's committed offset, log end, lag and member")
    delete = actions.add_parser("delete", help="delete groups with their committed offsets (refused while in use)")
    reset = actions.add_parser("reset-offsets", help="show, or with --execute commit, new offsets for a group")
    for action in (describe, delete, reset):
        action.add_argument("groups", nargs="*", metavar="GROUP")
    for action in (listing, describe, reset):
        action.add_argument("-f", "--format", choices=["text", "json"], default="text", help="how to print")
    delete.add_argument("--if-exists", action="store_true", help="a group that does not exist is no error")
    reset.add_argument("-t", "--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (may be given again)")
    reset.add_argument("--all-topics", action="store_true", help="every partition with a committed offset")
    to = reset.add_argument_group("targets (one of)")
    to.add_argument("--to-earliest", dest="to_named", action="append_const", const="earliest",
                    help="each partition's log start")
    to.add_argument("--to-latest", dest="to_named", action="append_const", const="latest", help="each partition's end")
    to.add_argument("--to-datetime", metavar="ISO-8601", help="the first offset at or after this time")
    to.add_argument("--to-offset", type=int, metavar="N", help="this offset, clamped to the log (negative: from the end)")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets only (what happens without --execute)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    for name, action in (("list", listing), ("describe", describe), ("delete", delete), ("reset-offsets", reset)):
        add_client_options(action)
        action.set_defaults(func=cmd_group, action=name)


def cmd_group(args: argparse.Namespace) -> int:
    from ..driver.admin import Admin

    if args.action != "list" and not args.groups:
        raise UsageError(f"group {args.action} needs at least one group id")
    if args.action == "list" and args.groups:
        raise UsageError("group list takes no group id")
    plan = reset_plan(args) if args.action == "reset-offsets" else None
    with Admin(client_config(args)) as admin:
        if args.action == "list":
            _list(admin, args.format)
        elif args.action == "describe":
            for group_id in args.groups:
                _describe(admin, group_id, args.format)
        elif args.action == "delete":
            admin.delete_groups(args.groups, missing_ok=args.if_exists)
            _say(f"deleted {', '.join(args.groups)}")
        else:
            assert plan is not None
            for group_id in args.groups:
                _reset(admin, group_id, plan, args.format)
    return EXIT_OK


@dataclass(frozen=True)
class ResetPlan:
    """What `reset-offsets` was asked: where to (an `Admin.reset_offsets` target), which
    partitions (None: wherever the group has committed offsets), and whether to commit."""

    to: Any
    partitions: dict[str, list[int] | None] | None
    execute: bool


def reset_plan(args: argparse.Namespace) -> ResetPlan:
    targets = [*(args.to_named or ()),
               *(() if args.to_datetime is None else [{"timestamp": _epoch_ms(args.to_datetime)}]),
               *(() if args.to_offset is None else [args.to_offset])]
    if len(targets) != 1:
        raise UsageError("group reset-offsets needs exactly one of --to-earliest, --to-latest, --to-datetime, "
                         "--to-offset")
    if args.dry_run and args.execute:
        raise UsageError("group reset-offsets: --dry-run and --execute exclude each other")
    if bool(args.topic) == args.all_topics:
        raise UsageError("group reset-offsets needs -t TOPIC[:PARTITIONS] or --all-topics (one of them)")
    return ResetPlan(targets[0], None if args.all_topics else topic_partitions(args.topic), args.execute)


def topic_partitions(specs: list[str]) -> dict[str, list[int] | None]:
    """`-t` values as {topic: partitions, or None for all}: `events`, `events:0,2`."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, listed = spec.partition(":")
        if not topic or (sep and not listed):
            raise UsageError(f"-t: expected TOPIC or TOPIC:P,P..., got {spec!r}")
        if not sep:
            out[topic] = None
            continue
        try:
            partitions = [int(p) for p in listed.split(",")]
        except ValueError:
            raise UsageError(f"-t: partitions are numbers, got {spec!r}") from None
        if topic in out and out[topic] is None:
            continue  # all of them already
        out[topic] = sorted({*(out.get(topic) or ()), *partitions})
    return out


def _epoch_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime: expected an ISO-8601 time such as 2024-05-01T12:00:00Z, got {text!r}") from None
    return int(when.astimezone().timestamp() * 1000)  # a time without a zone is local, as kafka-consumer-groups'


# -- the actions ------------------------------------------------------------------


def _list(admin: Any, fmt: str) -> None:
    groups = admin.list_groups()
    if fmt == "json":
        print(json.dumps([{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in groups]))
        return
    for g in groups:
        print(f"{g.group_id}\t{g.state or '-'}\t{g.protocol_type or '-'}")


def _describe(admin: Any, group_id: str, fmt: str) -> None:
    group = admin.require_group(group_id)
    holders = {(topic, p): m for m in group.members for topic, ps in m.assignment.items() for p in ps}
    committed = {(o.topic, o.partition) for o in admin.group_offsets(group_id)}
    wanted: dict[str, list[int] | None] = {}
    for topic, p in sorted(committed | set(holders)):
        wanted.setdefault(topic, []).append(p)  # type: ignore[union-attr]
    for topic in subscribed_unassigned(group):  # a broker that sends no assignments (tansu): all of it
        wanted[topic] = None
    offsets = admin.group_offsets(group_id, wanted) if wanted else []
    if fmt == "json":
        print(json.dumps(describe_dict(group, offsets)))
        return
    _say(_state_line(group))
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    for o in offsets:
        m = holders.get((o.topic, o.partition))
        rows.append([group_id, o.topic, str(o.partition), _or_dash(o.committed), _or_dash(o.end), _or_dash(o.lag),
                     m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"])
    print(_table(rows))


def subscribed_unassigned(group: GroupDescription) -> list[str]:
    """The topics a member subscribes to with none of their partitions assigned to it: the group
    consumes every partition of them, whatever the broker says of its members' assignments."""
    return sorted({t for m in group.members for t in m.topics if not m.assignment.get(t)})


def describe_dict(group: GroupDescription, offsets: list[PartitionOffsets]) -> dict[str, Any]:
    holders = {(topic, p): m.member_id for m in group.members for topic, ps in m.assignment.items() for p in ps}
    return {
        "group": group.group_id, "state": group.state, "protocol_type": group.protocol_type,
        "protocol": group.protocol, "coordinator": group.coordinator,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                     "client_host": m.client_host, "topics": list(m.topics),
                     "assignment": {t: list(ps) for t, ps in m.assignment.items()}} for m in group.members],
        "offsets": [{"topic": o.topic, "partition": o.partition, "committed": o.committed, "log_start": o.log_start,
                     "end": o.end, "lag": o.lag, "member_id": holders.get((o.topic, o.partition))}
                    for o in offsets],
    }


def _reset(admin: Any, group_id: str, plan: ResetPlan, fmt: str) -> None:
    new = admin.reset_offsets(group_id, plan.partitions, plan.to, dry_run=not plan.execute)
    if fmt == "json":
        print(json.dumps({"group": group_id, "executed": plan.execute,
                          "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(new.items())]}))
    else:
        rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
        rows += [[group_id, t, str(p), str(o)] for (t, p), o in sorted(new.items())]
        print(_table(rows))
    _say(f"group {group_id}: {len(new)} offsets committed" if plan.execute
         else f"group {group_id}: dry run, nothing committed (--execute commits these offsets)")


# -- utilities ------------------------------------------------------------------------


def _state_line(group: GroupDescription) -> str:
    if not group.members:
        return f"Consumer group '{group.group_id}' has no active members ({group.state})."
    return (f"Consumer group '{group.group_id}': {group.state}, {counted(len(group.members), 'member')}, "
            f"assignor {group.protocol or '-'}, coordinator {group.coordinator}.")


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _say(text: str) -> None:
    print(f"raykafka: {text}", file=sys.stderr)
