"""The lag curve of a group that sizes itself by lag, against a fixed group of its minimum size.

`python -m raykafka.app.bench.lag_curve --runs 2 --out LAG.md` writes the report, its records
(LAG.json) and the curves (LAG.png) beside it; `--from-records` writes the report and the picture
again from the records, measuring nothing. Each run, on an embedded tansu, for each group in
turn (the fixed one first), on a topic of its own with PARTITIONS partitions:

- a feed from the driver, round robin over the partitions: BASE_RATE messages a second, then
  BURST_RATE for BURST_S seconds, then BASE_RATE again, FEED_S seconds in all;
- a `ConsumerGroup` whose handler spends HANDLE_S a record, one batch at a time in each member
  (a lock a process: a member stands for one connection to a slow sink), so one member handles
  1 / HANDLE_S records a second, more than BASE_RATE and less than BURST_RATE;
- the group's lag (each claimed partition's high watermark less what its handler has taken) and
  its size, every SAMPLE_S from the feed's start until every record is handled.

The fixed group has MIN members; the other `members=(MIN, MAX)` with `lag_per_member`
LAG_PER_MEMBER, `grow_after_s` GROW_AFTER_S and `shrink_after_s` SHRINK_AFTER_S (cooperative-
sticky, the group's default when sized by lag). From each curve: the peak lag, the seconds from
the burst's end until the lag is back under LAG_PER_MEMBER, the seconds from the feed's start
until every record was handled, the largest size, and the records handled more than once.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .rebalance import handled, note  # the members' notes of what they handled

PARTITIONS = 8
BASE_RATE = 1_000  # messages a second before and after the burst
BURST_RATE = 6_000  # messages a second during the burst
BURST_AT_S, BURST_S = 10.0, 20.0  # the burst starts this long after the feed, and lasts this long
FEED_S = 60.0  # the feed's whole length
HANDLE_S = 0.0005  # a record's handling: 2,000 records a second a member
MIN, MAX = 1, 4
LAG_PER_MEMBER = 5_000
GROW_AFTER_S = 2.0
SHRINK_AFTER_S = 10.0
SESSION_MS = 6_000  # tansu answers a join after half of it
SAMPLE_S = 0.5
DRAIN_TIMEOUT_S = 300.0
GROUPS = ("fixed", "by-lag")


MEMBER_LOCK = threading.Lock()  # in a member's process: one batch handled at a time


def handle_slowly(notes: str, batch: Any) -> None:
    """The groups' handler, in the member actors: HANDLE_S a record, one batch at a time in a
    member (so a member handles 1 / HANDLE_S records a second), then a note of it (`note`)."""
    with MEMBER_LOCK:
        time.sleep(HANDLE_S * batch.num_rows)
    note(notes, batch)


def rate_at(t: float) -> int:
    """The feed's rate, in messages a second, `t` seconds after it started."""
    return BURST_RATE if BURST_AT_S <= t < BURST_AT_S + BURST_S else BASE_RATE


class Feed:
    """The feed's schedule (`rate_at`), round robin over the partitions, from a thread."""

    def __init__(self, producer: Any, topic: str):
        self.producer, self.topic = producer, topic
        self.sent = 0
        self.started = self.started_wall = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tick = 0.01
        self.started, self.started_wall = time.monotonic(), time.time()
        next_at, owed = self.started, 0.0
        while (now := time.monotonic()) - self.started < FEED_S:
            owed += rate_at(now - self.started) * tick
            while owed >= 1:
                self.producer.send(self.topic, b"m%d" % self.sent, partition=self.sent % PARTITIONS)
                self.sent += 1
                owed -= 1
            next_at += tick
            time.sleep(max(0.0, next_at - time.monotonic()))

    def start(self) -> Feed:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()


def one_run(bootstrap: str, kind: str, run: int) -> dict[str, Any]:
    """One group's curve: samples of (seconds from the feed's start, lag, members)."""
    import os

    from raykafka.driver.admin import Admin
    from raykafka.driver.consumer_group import ConsumerGroup
    from raykafka.driver.producer import Producer

    topic = f"lag-{kind}-{run}-{os.getpid()}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: PARTITIONS})
    notes = Path(tempfile.mkdtemp(prefix="lag-"))
    config = {"bootstrap.servers": bootstrap, "group.id": topic, "session.timeout.ms": SESSION_MS,
              "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 500}
    sizing = ({"members": MIN} if kind == "fixed" else
              {"members": (MIN, MAX), "lag_per_member": LAG_PER_MEMBER, "grow_after_s": GROW_AFTER_S,
               "shrink_after_s": SHRINK_AFTER_S})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    group = ConsumerGroup(config, [topic], functools.partial(handle_slowly, str(notes)), **sizing)
    samples: list[list[float]] = []
    try:
        _wait(lambda: _holds_all(group), "the group holding every partition", 120.0)
        feed = Feed(producer, topic).start()
        while True:
            time.sleep(SAMPLE_S)
            statuses = [s for s in group.status() if not s.get("fatal")]
            at = time.monotonic() - feed.started
            samples.append([round(at, 2), sum(s.get("lag", 0) for s in statuses), len(statuses)])
            if at > FEED_S and feed.sent and handled(notes) >= feed.sent:
                break
            if at > FEED_S + DRAIN_TIMEOUT_S:
                raise TimeoutError(f"{kind}: every record not handled within {DRAIN_TIMEOUT_S:.0f}s of the feed's end")
        feed.join()
        scalings = [[round(s.at - feed.started_wall, 2), s.before, s.after] for s in group.scalings]
    finally:
        group.close()
        producer.close(30)
    return {"group": kind, "run": run, "messages": feed.sent, "handled": handled(notes), "samples": samples,
            "scalings": scalings}


def _holds_all(group: Any) -> bool:
    claimed = [p for s in group.status() for ps in s["claims"].values() for p in ps]
    return sorted(claimed) == list(range(PARTITIONS))


def _wait(predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.2)


def figures(run: dict[str, Any]) -> dict[str, Any]:
    """What a curve says: its peak lag, the seconds from the burst's end until the lag is back under
    LAG_PER_MEMBER (for good), the seconds until every record was handled, its largest size and the
    records handled twice."""
    samples = run["samples"]
    burst_end = BURST_AT_S + BURST_S
    over = [t for t, lag, _ in samples if lag >= LAG_PER_MEMBER]
    return {"peak_lag": max(lag for _, lag, _ in samples),
            "back_under_s": round(max(0.0, max(over) + SAMPLE_S - burst_end), 1) if over else 0.0,
            "all_handled_s": samples[-1][0],
            "largest": max(n for _, _, n in samples),
            "handled_twice": run["handled"] - run["messages"]}


def spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    """The median, and the lowest and highest, of the runs' `values`."""
    return f"{statistics.median(values):,.{digits}f}{unit} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def report(runs: list[dict[str, Any]], command: str, picture: str) -> str:
    rows = {kind: [figures(r) for r in runs if r["group"] == kind] for kind in GROUPS}
    lines = ["# A group sized by lag against a fixed group", "",
             f"Written by `{command}` on {datetime.date.today().isoformat()}; the records are in "
             f"{Path(picture).with_suffix('.json').name}, the curves in [{picture}]({picture}). What each figure is: "
             "`app/bench/lag_curve.py`'s docstring.", "",
             f"{PARTITIONS} partitions fed at {BASE_RATE:,} messages a second, {BURST_RATE:,} for {BURST_S:.0f} s "
             f"from {BURST_AT_S:.0f} s, {FEED_S:.0f} s in all; a member handles {1 / HANDLE_S:,.0f} records a second. "
             f"The fixed group has {MIN} member; the other `members=({MIN}, {MAX})`, `lag_per_member={LAG_PER_MEMBER:,}`, "
             f"`grow_after_s={GROW_AFTER_S:g}`, `shrink_after_s={SHRINK_AFTER_S:g}`. Median of "
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
              f"{LAG_PER_MEMBER:,} records; \"handled twice\" is handled less sent (a group promises at least once).", ""]
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
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
        ax.axvspan(BURST_AT_S, BURST_AT_S + BURST_S, color="0.9")
    lag_ax.set_ylabel("lag (records)")
    lag_ax.legend()
    size_ax.set_ylabel("members")
    size_ax.set_xlabel("seconds from the feed's start (grey: the burst)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default="LAG.md", help="the report; its records (.json) and curves (.png) go beside it")
    parser.add_argument("--from-records", action="store_true",
                        help="write the report and the picture again from the records beside it, measuring nothing")
    args = parser.parse_args()
    out = Path(args.out)
    picture = out.with_suffix(".png")
    if args.from_records:
        records = json.loads(out.with_suffix(".json").read_text())
        runs, command = records["runs"], records["command"]
    else:
        import ray

        from raykafka.driver.embedded_broker import EmbeddedBroker

        command = "python -m raykafka.app.bench.lag_curve " + " ".join(sys.argv[1:])
        runs = []
        with EmbeddedBroker() as broker:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
            try:
                for run in range(args.runs):
                    for kind in GROUPS:
                        runs.append(one_run(broker.bootstrap, kind, run))
                        print(json.dumps({**figures(runs[-1]), "group": kind, "run": run}), flush=True)
            finally:
                ray.shutdown()
        out.with_suffix(".json").write_text(json.dumps({"command": command, "taken": datetime.date.today().isoformat(),
                                                        "runs": runs}) + "\n")
    plot(runs, picture)
    out.write_text(report(runs, command, picture.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
