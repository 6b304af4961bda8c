"""The pause a group's scale-up makes in its consumption: eager against cooperative (KIP-429).

`python -m raykafka.app.bench.rebalance --runs 3 --out REBALANCING.md` writes the report and,
beside it, its records (REBALANCING.json). Each run: an embedded tansu, a topic of PARTITIONS
partitions fed at RATE messages a second (round robin, from the driver), a `ConsumerGroup` of
FROM members that has read everything so far; then `scale(TO)`, and the feed goes on for
AFTER_S seconds. The members note, in files, when they handled each batch, of which partition
and from which offset. From those notes, per run:

- the group's longest pause: the longest time, from `scale()` on, with no record handled by any
  member (an eager rebalance stops every member; a cooperative one only the partitions that move);
- each partition's longest gap in handling from `scale()` on; of the partitions that stayed with
  their member, the largest such gap; of those that moved to a new member, the median;
- how many partitions changed member;
- how many records were handled more than once (at least once is what a group promises).

tansu answers a JoinGroup only after half the member's `session.timeout.ms`, so every join
round here costs at least SESSION_MS / 2 (a Kafka broker waits `group.initial.rebalance.delay.ms`
for a new group only); the cooperative protocol takes two rounds to move a partition.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .group_bench import Feed, arguments, handled, measure, note, read_notes

PARTITIONS = 16
FROM, TO = 4, 8
RATE = 2_000  # messages a second, from the driver
SESSION_MS = 6_000  # tansu answers a join after half of it
AFTER_S = 20.0  # the feed goes on this long after scale()
SETTLE_TIMEOUT_S = 120.0
PROTOCOLS = {"eager": "sticky", "cooperative": "cooperative-sticky"}


def _longest_gap(times: list[float], start: float, end: float) -> float:
    edges = [start, *[t for t in times if start <= t <= end], end]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def one_run(bootstrap: str, mode: str, run: int) -> dict[str, Any]:
    from raykafka.driver.admin import Admin
    from raykafka.driver.consumer_group import ConsumerGroup
    from raykafka.driver.producer import Producer

    topic = f"rebalance-{mode}-{run}-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: PARTITIONS})
    notes = Path(tempfile.mkdtemp(prefix="rebalance-"))
    config = {"bootstrap.servers": bootstrap, "group.id": topic, "partition.assignment.strategy": PROTOCOLS[mode],
              "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
              "auto.commit.interval.ms": 500}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    feed = Feed(producer, topic, PARTITIONS, lambda _: RATE).start()
    group = ConsumerGroup(config, [topic], functools.partial(note, str(notes)), members=FROM)
    try:
        _wait(lambda: _settled(group, FROM), f"the group of {FROM} settled")
        _wait(lambda: handled(notes)[1] >= feed.sent - RATE, "the group caught up with the feed")
        owners_before = _owners(group)
        scaled_at = time.time()
        group.scale(TO)
        _wait(lambda: _settled(group, TO), f"the group of {TO} settled")
        settled_at = time.time()
        owners_after = _owners(group)
        time.sleep(max(0.0, AFTER_S - (settled_at - scaled_at)))
        feed.stop()
        producer.flush(30)
        _wait(lambda: handled(notes)[1] >= feed.sent, "every message handled")
    finally:
        feed.stop()
        group.close()
        producer.close(30)
    noted = read_notes(notes)
    end = max(scaled_at + AFTER_S, settled_at)
    gaps = {partition: _longest_gap([n.at for n in noted if n.partition == partition], scaled_at, end)
            for partition in range(PARTITIONS)}
    moved = [p for p in range(PARTITIONS) if owners_before[p] != owners_after[p]]
    stayed = [p for p in range(PARTITIONS) if p not in moved]
    return {"mode": mode, "run": run, "group_pause_s": round(_longest_gap([n.at for n in noted], scaled_at, end), 3),
            "stayed_pause_max_s": round(max(gaps[p] for p in stayed), 3) if stayed else None,
            "moved_pause_median_s": round(statistics.median(gaps[p] for p in moved), 3) if moved else None,
            "settled_s": round(settled_at - scaled_at, 3),
            "moved": len(moved),
            "messages": feed.sent, "handled": sum(n.records for n in noted)}


def _owners(group: Any) -> dict[int, str]:
    return {p: s["member_id"] for s in group.status() for ps in s["claims"].values() for p in ps}


def _settled(group: Any, members: int) -> bool:
    statuses = group.status()
    claimed = [p for s in statuses for ps in s["claims"].values() for p in ps]
    return (len(statuses) == members and len({s["generation_id"] for s in statuses}) == 1
            and sorted(claimed) == list(range(PARTITIONS)) and all(s["claims"] for s in statuses))


def _wait(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {SETTLE_TIMEOUT_S:.0f}s")
        time.sleep(0.2)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def report(runs: list[dict[str, Any]], command: str) -> str:
    by_mode = {mode: [r for r in runs if r["mode"] == mode] for mode in PROTOCOLS}
    lines = ["# Rebalancing: the pause of a scale-up, eager against cooperative", "",
             f"Written by `{command}` on {datetime.date.today().isoformat()}; the records are in "
             "REBALANCING.json. What each figure is: `app/bench/rebalance.py`'s docstring.", "",
             f"A `ConsumerGroup` of {FROM} members reading {PARTITIONS} partitions fed at {RATE:,} messages a "
             f"second grows to {TO} (`scale({TO})`); `session.timeout.ms` {SESSION_MS:,} (tansu answers a "
             f"join after half of it). Median of {len(by_mode['eager'])} runs each (lowest–highest).", "",
             "| protocol | group's longest pause | longest gap of a partition that stayed | a moved partition's "
             "longest gap, median | settled after | partitions moved | handled twice, of all |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode, rows in by_mode.items():
        lines.append(f"| {mode} (`{PROTOCOLS[mode]}`) | {spread([r['group_pause_s'] for r in rows])} | "
                     f"{spread([r['stayed_pause_max_s'] for r in rows])} | "
                     f"{spread([r['moved_pause_median_s'] for r in rows])} | {spread([r['settled_s'] for r in rows])} | "
                     f"{statistics.median([r['moved'] for r in rows]):.0f} | "
                     f"{sum(r['handled'] - r['messages'] for r in rows):,} of {sum(r['messages'] for r in rows):,} |")
    lines += ["", "The group's longest pause is the longest time after `scale()` in which no member handled a "
              "record. Under the eager protocol every member gives up every partition at each rebalance; under "
              "the cooperative protocol a member gives up only the partitions that move, which wait for two join "
              "rounds. A partition that stayed with its member may still wait: its column gives the longest gap "
              "such a partition met. \"Handled twice\" counts the records handled more than once (handled less "
              "sent).", ""]
    return "\n".join(lines)


def main() -> int:
    args = arguments(__doc__, 3, "REBALANCING.md", "its records (.json) go")
    out = Path(args.out)
    if args.from_records:
        records = json.loads(out.with_suffix(".json").read_text())
        out.write_text(report(records["runs"], records["command"]))
        return 0
    command = "python -m raykafka.app.bench.rebalance " + " ".join(sys.argv[1:])
    runs = measure(args.runs, tuple(PROTOCOLS), one_run)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "taken": datetime.date.today().isoformat(),
                                                    "runs": runs}, indent=1) + "\n")
    out.write_text(report(runs, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
