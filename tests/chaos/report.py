"""Render the chaos suite's JSON records into RELIABILITY.md.

    python -m pytest tests/chaos -q          # writes tests/chaos/results/*.json
    python tests/chaos/report.py             # writes RELIABILITY.md at the repository root

Options: --results DIR (default tests/chaos/results or $RAYKAFKA_CHAOS_RESULTS), --out FILE.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

INTRO = """# Reliability

What the chaos suite (`tests/chaos/`) did to raykafka and what came out. Every figure below is
read from the JSON record a test wrote when it ran (`tests/chaos/results/`), rendered by
`python tests/chaos/report.py`. Short form: `python -m pytest tests/chaos -q` (CI); long form:
`--chaos-full` or `RAYKAFKA_CHAOS_FULL=1` (100,000 messages in the producer scenarios).

Definitions. *sent*: futures returned by `send`. *delivered*: futures with an offset. *failed*:
futures with an exception (by cause: the class, the broker error's name, `actor-died` when the
message names a dead actor). *lost*: delivered, but the broker's log does not hold that message
at the reported offset (must be 0); a success reported without an offset (acks other than 0)
counts as lost, as its place cannot be checked, and *without offset* says how many.
*duplicated*: a message more than once in the log. *reordered*: within a partition, a message
logged after one sent later. *failed but written*: failed, yet in the log (a failure whose fate
was unknown, e.g. a timeout). *unresolved*: futures still pending when the test's bound ran out
(must be 0). A blank figure was not measured by that scenario (a consumer scenario, say, has
no log of its own to read back); it is left out of the totals.
"""

SCENARIOS = {
    "test_producer_mock_chaos": "1. Producer on a mock cluster of 3 brokers: leaders move, retriable errors, dropped connections",
    "test_producer_tansu_proxy": "2. Producer against tansu behind the fault-injecting proxy",
    "test_actor_failure": "3. Actor failure mid-stream (ray.kill): the producer heals, consumers are replaced",
    "test_broker_restart": "4. Broker restart mid-stream (tansu stopped and started on the same port)",
    "test_corrupt_batch": "5. A corrupted batch on consume",
    "test_consumer_outage": "6. Consumers through a broker outage (unreachable, or restarted with its log)",
    "test_consumer_heal": "7. Consumer actors killed mid-read (ray.kill, no_restart=False): healed, time to heal",
    "test_producer_heal_outage": "8. The producer heals on a bad day: a death during an outage, two deaths, close mid-heal",
}

MAIN = ["sent", "delivered", "failed", "unresolved", "lost", "reordered", "duplicated", "failed_but_written",
        "without_offset"]
SKIP = {"test", "module", "doc", "written_at", "faults", "failed_by_cause", "actors_killed", "form", *MAIN}


def _fmt(v: object) -> str:
    if v is None:  # a figure the scenario did not measure: blank, never a made-up 0
        return ""
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in sorted(v.items())) or "none"
    if isinstance(v, list):
        return "; ".join(_fmt(x) for x in v) or "none"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def render(records: list[dict]) -> str:
    out = [INTRO]
    forms = sorted({r.get("form", "?") for r in records})
    when = max((r.get("written_at", "") for r in records), default="")
    out.append(f"Records: {len(records)}, form: {', '.join(forms)}, last written {when}.\n")
    out.append("## Summary\n")
    out.append("| scenario | test | form | " + " | ".join(MAIN) + " | failed by cause | faults injected | actors killed |")
    out.append("|" + "---|" * (len(MAIN) + 6))
    for r in records:
        cells = [_fmt(r.get(k, "")) for k in MAIN]
        out.append(f"| {r['module'].replace('test_', '')} | {r['test'].replace('test_', '')} | {r.get('form', '?')} | "
                   + " | ".join(cells)
                   + f" | {_fmt(r.get('failed_by_cause', {}))} | {_fmt(r.get('faults', {}))} | "
                   f"{_fmt(r.get('actors_killed', []))} |")
    totals = []
    for k in ("sent", "delivered", "failed", "lost", "reordered", "duplicated", "unresolved"):
        measured = [int(r[k]) for r in records if r.get(k) is not None]
        note = "" if len(measured) == len(records) else f" (measured in {len(measured)} of {len(records)} records)"
        totals.append(f"{k} {sum(measured):,}{note}")
    out.append("\nTotals: " + ", ".join(totals) + ".\n")
    faults: dict[str, int] = {}
    for r in records:
        for k, v in (r.get("faults") or {}).items():
            if k not in ("proxy/requests", "proxy/connections"):
                faults[k] = faults.get(k, 0) + int(v)
    out.append("Faults injected, all scenarios, by kind: " + _fmt(faults) + ".\n")
    killed = [a for r in records for a in r.get("actors_killed", [])]
    out.append(f"Actors killed: {len(killed)}.\n")
    out.extend(_outage_table(records))
    for module, title in SCENARIOS.items():
        mine = [r for r in records if r.get("module") == module]
        if not mine:
            continue
        out.append(f"## {title}\n")
        for r in mine:
            out.append(f"### `{r['test']}` ({r.get('form', '?')} form)\n")
            if r.get("doc"):
                out.append(" ".join(r["doc"].split()) + "\n")
            for k in MAIN:
                if k in r:
                    out.append(f"- {k}: {_fmt(r[k]) if r[k] is not None else 'not measured'}")
            out.append(f"- failed by cause: {_fmt(r.get('failed_by_cause', {}))}")
            out.append(f"- faults injected: {_fmt(r.get('faults', {}))}")
            out.append(f"- actors killed: {_fmt(r.get('actors_killed', []))}")
            for k in sorted(set(r) - SKIP):
                out.append(f"- {k.replace('_', ' ')}: {_fmt(r[k])}")
            out.append("")
    return "\n".join(out) + "\n"


OUTAGE_COLUMNS = [  # (heading, figure) of the outage scenarios' fault -> outcome table
    ("broker", "mode"), ("down s", "seconds_down"), ("producer delivered", "delivered"),
    ("producer failed (of them written)", None), ("producer resumed s", "producer_resumed_s"),
    ("Consumer lost", "consumer_lost"), ("Consumer repeats", "consumer_repeats"),
    ("Consumer resumed s", "consumer_resumed_s"), ("group lost", "group_lost"),
    ("group redelivered", "group_redelivered"), ("group resumed s", "group_resumed_s"),
    ("group generations", "group_generations"), ("producer settled s", "producer_settled_s"),
    ("Consumer all read s", "consumer_all_read_s"), ("group all read s", "group_all_read_s"),
]


def _outage_table(records: list[dict]) -> list[str]:
    """Fault -> outcome, one row per outage scenario record (a Consumer, a ConsumerGroup of 3 and a
    producer through the outage)."""
    rows = sorted((r for r in records if r.get("module") == "test_consumer_outage" and "mode" in r),
                  key=lambda r: (r["mode"], r.get("outage_s", 0)))
    if not rows:
        return []
    out = ["## Broker outages: fault → outcome\n",
           "A producer (~400 msg/s), a `Consumer` of 4 partitions and a `ConsumerGroup` of 3 members "
           "(session.timeout.ms=10000) while the broker is unreachable (a proxy refuses connections) or "
           "restarted (tansu on S3 storage killed, then started on the same port); *resumed*: seconds from "
           "the broker's return to the first new message; *settled*: until the producer's last message ended; "
           "*all read*: until the last message delivered was first read (after the producer delivered it); "
           "*redelivered*: messages a member processed again after its session expired (from its last "
           "commit).\n",
           "| " + " | ".join(h for h, _ in OUTAGE_COLUMNS) + " |", "|" + "---|" * len(OUTAGE_COLUMNS)]
    for r in rows:
        cells = [f"{r.get('failed', 0):,} ({r.get('failed_but_read', 0):,})" if key is None else _fmt(r.get(key, ""))
                 for _, key in OUTAGE_COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=os.environ.get("RAYKAFKA_CHAOS_RESULTS", str(HERE / "results")))
    parser.add_argument("--out", default=str(ROOT / "RELIABILITY.md"))
    parser.add_argument("--notes", default=str(HERE / "NOTES.md"),
                        help="hand-written findings appended after the figures, if the file exists")
    args = parser.parse_args()
    records = [json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*.json"))]
    order = list(SCENARIOS)
    records.sort(key=lambda r: (order.index(r["module"]) if r.get("module") in order else 99, r["test"]))
    text = render(records)
    notes = Path(args.notes)
    if notes.exists():
        text += "\n" + notes.read_text()
    Path(args.out).write_text(text)
    print(f"wrote {args.out} from {len(records)} records")


if __name__ == "__main__":
    main()
