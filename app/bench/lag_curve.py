"""The lag curve of a group that sizes itself by lag, against a fixed group of its minimum size.

`python -m raykafka.app.bench.lag_curve --runs 2 --out LAG.md` writes the report, its records
(LAG.json) and the curves (LAG.png) beside it; `--from-records` writes the report and the picture
again from the records, measuring nothing. Each run, on an embedded tansu, for each group in
turn (the fixed one first), on a topic of its own (`Workload`, kept in the records):

- a feed from the driver, round robin over the partitions: `base_rate` messages a second, then
  `burst_rate` for `burst_s` seconds, then `base_rate` again, `feed_s` seconds in all;
- a `ConsumerGroup` whose handler spends `handle_s` a record, one batch at a time in each member
  (a lock a process: a member stands for one connection to a slow sink), so one member handles
  1 / `handle_s` records a second, more than `base_rate` and less than `burst_rate`;
- the group's lag (each claimed partition's high watermark less what its handler has taken) and
  its size, every SAMPLE_S from the feed's start until every record is handled.

The fixed group has `lo` members; the other `members=(lo, hi)` with `lag_per_member`,
`grow_after_s` and `shrink_after_s` (cooperative-sticky, the group's default when sized by lag).
From each curve: the peak lag, the seconds from the burst's end until the lag is back under
`lag_per_member`, the seconds from the feed's start until every record was handled, the largest
size, and the records handled more than once.
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
from typing import Any, NamedTuple

from .group_bench import Feed, arguments, handle_slowly, handled, measure


class Workload(NamedTuple):
    """What a run does; kept in the records, which the report is written from."""

    partitions: int = 8
    base_rate: int = 1_000  # messages a second before and after the burst
    burst_rate: int = 6_000  # messages a second during the burst
    burst_at_s: float = 10.0  # the burst starts this long after the feed
    burst_s: float = 20.0  # and lasts this long
    feed_s: float = 60.0  # the feed's whole length
    handle_s: float = 0.0005  # a record's handling: 2,000 records a second a member
    lo: int = 1  # the fixed group's size, and the other's least
    hi: int = 4  # the other's most
    lag_per_member: int = 5_000
    grow_after_s: float = 2.0
    shrink_after_s: float = 10.0

    def rate_at(self, t: float) -> int:
        """The feed's rate, in messages a second, `t` seconds after it started."""
        return self.burst_rate if self.burst_at_s <= t < self.burst_end else self.base_rate

    @property
    def burst_end(self) -> float:
        return self.burst_at_s + self.burst_s


WORKLOAD = Workload()
SESSION_MS = 6_000  # tansu answers a join after half of it
SAMPLE_S = 0.5
DRAIN_TIMEOUT_S = 300.0
GROUPS = ("fixed", "by-lag")


def one_run(bootstrap: str, kind: str, run: int, w: Workload = WORKLOAD) -> dict[str, Any]:
    """One group's curve: samples of (seconds from the feed's start, lag, members)."""
    from raykafka.driver.admin import Admin
    from raykafka.driver.consumer_group import ConsumerGroup
    from raykafka.driver.producer import Producer

    topic = f"lag-{kind}-{run}-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: w.partitions})
    notes = Path(tempfile.mkdtemp(prefix="lag-"))
    config = {"bootstrap.servers": bootstrap, "group.id": topic, "session.timeout.ms": SESSION_MS,
              "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 500}
    sizing = ({"members": w.lo} if kind == "fixed" else
              {"members": (w.lo, w.hi), "lag_per_member": w.lag_per_member, "grow_after_s": w.grow_after_s,
               "shrink_after_s": w.shrink_after_s})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    group = ConsumerGroup(config, [topic], functools.partial(handle_slowly, str(notes), w.handle_s), **sizing)
    samples: list[list[float]] = []
    try:
        _wait(lambda: _holds_all(group, w.partitions), "the group holding every partition", 120.0)
        feed = Feed(producer, topic, w.partitions, w.rate_at, w.feed_s).start()
        while True:
            time.sleep(SAMPLE_S)
            statuses = [s for s in group.status() if not s.get("fatal")]
            at = time.monotonic() - feed.started
            samples.append([round(at, 2), sum(s.get("lag", 0) for s in statuses), len(statuses)])
            if at > w.feed_s and feed.sent and handled(notes)[1] >= feed.sent:
                break
            if at > w.feed_s + DRAIN_TIMEOUT_S:
                raise TimeoutError(f"{kind}: every record not handled within {DRAIN_TIMEOUT_S:.0f}s of the feed's end")
        feed.stop()
        scalings = [[round(s.at - feed.started_wall, 2), s.before, s.after] for s in group.scalings]
    finally:
        group.close()
        producer.close(30)
    handlings, records = handled(notes)
    return {"group": kind, "run": run, "messages": feed.sent, "handled": handlings, "distinct": records, "samples": samples,
            "scalings": scalings}


def _holds_all(group: Any, partitions: int) -> bool:
    claimed = [p for s in group.status() for ps in s["claims"].values() for p in ps]
    return sorted(claimed) == list(range(partitions))


def _wait(predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.2)


def figures(run: dict[str, Any], w: Workload = WORKLOAD) -> dict[str, Any]:
    """What a curve says: its peak lag, the seconds from the burst's end until the lag is back under
    `lag_per_member` (for good), the seconds until every record was handled, its largest size and
    the records handled twice."""
    samples = run["samples"]
    over = [t for t, lag, _ in samples if lag >= w.lag_per_member]
    return {"peak_lag": max(lag for _, lag, _ in samples),
            "back_under_s": round(max(0.0, max(over) + SAMPLE_S - w.burst_end), 1) if over else 0.0,
            "all_handled_s": samples[-1][0],
            "largest": max(n for _, _, n in samples),
            "handled_twice": run["handled"] - run["distinct"]}


def spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    """The median, and the lowest and highest, of the runs' `values`."""
    return f"{statistics.median(values):,.{digits}f}{unit} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def report(runs: list[dict[str, Any]], command: str, picture: str, w: Workload = WORKLOAD) -> str:
    rows = {kind: [figures(r, w) for r in runs if r["group"] == kind] for kind in GROUPS}
    lines = ["# A group sized by lag against a fixed group", "",
             f"Written by `{command}` on {datetime.date.today().isoformat()}; the records are in "
             f"{Path(picture).with_suffix('.json').name}, the curves in [{picture}]({picture}). What each figure is: "
             "`app/bench/lag_curve.py`'s docstring.", "",
             f"{w.partitions} partitions fed at {w.base_rate:,} messages a second, {w.burst_rate:,} for {w.burst_s:.0f} s "
             f"from {w.burst_at_s:.0f} s, {w.feed_s:.0f} s in all; a member handles {1 / w.handle_s:,.0f} records a "
             f"second. The fixed group has {w.lo} member(s); the other `members=({w.lo}, {w.hi})`, "
             f"`lag_per_member={w.lag_per_member:,}`, `grow_after_s={w.grow_after_s:g}`, "
             f"`shrink_after_s={w.shrink_after_s:g}`. Median of "
             f"{len(rows['fixed'])} runs each (lowest–highest).", "",
             "| group | peak lag | lag back under the bound, after the burst | every record handled, from the "
             "feed's start | largest size | handled twice, of all |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, figs in rows.items():
        runs_of = [r for r in runs if r["group"] == kind]
        lines.append(f"| {kind} | {spread([f['peak_lag'] for f in figs], digits=0)} | "
                     f"{spread([f['back_under_s'] for f in figs], ' s')} | {spread([f['all_handled_s'] for f in figs], ' s')} | "
                     f"{max(f['largest'] for f in figs)} | "
                     f"{sum(f['handled_twice'] for f in figs):,} of {sum(r['messages'] for r in runs_of):,} |")
    changes = [f"run {r['run']}: " + ", ".join(f"{b}→{a} at {t:.0f} s" for t, b, a in r["scalings"])
               for r in runs if r["group"] == "by-lag"]
    lines += ["", "The group sized by lag changed size as follows (seconds from the feed's start):", ""]
    lines += [f"- {c}" for c in changes]
    lines += ["", "\"Lag back under the bound\" counts from the burst's end until the lag stays under "
              f"{w.lag_per_member:,} records; \"handled twice\" counts each handling of a record after its first, by the offsets the members noted (a group promises at least once).", ""]
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path, w: Workload = WORKLOAD) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag_ax, size_ax) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[3, 1])
    colours = {"fixed": "tab:red", "by-lag": "tab:blue"}
    for r in runs:
        t = [s[0] for s in r["samples"]]
        label = r["group"] if r["run"] == 0 else None
        lag_ax.plot(t, [s[1] for s in r["samples"]], color=colours[r["group"]], alpha=0.8, label=label)
        size_ax.step(t, [s[2] for s in r["samples"]], where="post", color=colours[r["group"]], alpha=0.8)
    for ax in (lag_ax, size_ax):
        ax.axvspan(w.burst_at_s, w.burst_end, color="0.9")
    lag_ax.set_ylabel("lag (records)")
    lag_ax.legend()
    size_ax.set_ylabel("members")
    size_ax.set_xlabel("seconds from the feed's start (grey: the burst)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    args = arguments(__doc__, 2, "LAG.md", "its records (.json) and curves (.png) go")
    out = Path(args.out)
    picture = out.with_suffix(".png")
    if args.from_records:
        records = json.loads(out.with_suffix(".json").read_text())
        runs, command, workload = records["runs"], records["command"], Workload(**records["workload"])
    else:
        command, workload = "python -m raykafka.app.bench.lag_curve " + " ".join(sys.argv[1:]), WORKLOAD
        runs = measure(args.runs, GROUPS, one_run, lambda r: {**figures(r), "group": r["group"], "run": r["run"]})
        out.with_suffix(".json").write_text(json.dumps({"command": command, "taken": datetime.date.today().isoformat(),
                                                        "workload": workload._asdict(), "runs": runs}) + "\n")
    plot(runs, picture, workload)
    out.write_text(report(runs, command, picture.name, workload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
