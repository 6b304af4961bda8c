"""Render the chaos suite's JSON records into RELIABILITY.md; or run the suite, then render.

    python tests/chaos/report.py --run --full   # the whole file, from a clean checkout
    python tests/chaos/report.py [--full]       # render the records present

`--run` empties `tests/chaos/records/`, runs `python -m pytest tests/chaos --run-slow`
(`--chaos-full` with `--full`) with this Python (the one raykafka is installed in: setup.sh's
`.venv`), and renders what the passing tests wrote, whatever failed. `--full` also says which
form the file is of: a record of the other form is said to be so, and so is a test with no
record. Rendering needs no raykafka. Options: --records DIR, --out FILE, --notes FILE.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RECORDS = HERE / "records"  # committed: every figure of RELIABILITY.md is read from here
COMMAND = "python tests/chaos/report.py --run --full"
NOT_MEASURED = "not measured"

INTRO = f"""# Reliability

Regenerate this whole file from a clean checkout with `{COMMAND}` (with the Python that
`setup.sh` installs raykafka in, `.venv/bin/python`): it runs the chaos suite's long form
(`python -m pytest tests/chaos --chaos-full --run-slow`) into `tests/chaos/records/` and renders
those records. Do not edit it by hand.

What the chaos suite (`tests/chaos/`) did to raykafka and what came out. Every figure below is
read from the JSON record a test wrote when it passed (`tests/chaos/records/`, committed; each
says its form, when it was written and the commit it ran on). Short form:
`python -m pytest tests/chaos -q` (CI); long form: `--chaos-full` or `RAYKAFKA_CHAOS_FULL=1`
(100,000 messages in the producer scenarios).

Definitions. *sent*: futures returned by `send`. *delivered*: futures with an offset. *failed*:
futures with an exception (by cause: the class, the broker error's name, `actor-died` when the
message names a dead actor). *lost*: delivered, but the broker's log does not hold that message
at the reported offset (must be 0); a success reported without an offset (acks other than 0)
counts as lost, as its place cannot be checked, and *without offset* says how many.
*duplicated*: a message more than once in the log. *reordered*: within a partition, a message
logged after one sent later (in a consumer scenario: handed out after one sent later).
*failed but written*: failed, yet in the log (a failure whose fate was unknown, e.g. a timeout).
*unresolved*: futures still pending when the test's bound ran out (must be 0). *{NOT_MEASURED}*:
the scenario does not measure that figure (a consumer scenario, say, has no log of its own to
read back); it is left out of the totals.
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
OTHER_SCENARIO = len(SCENARIOS)  # a module not listed sorts after the listed ones

MAIN = ["sent", "delivered", "failed", "unresolved", "lost", "reordered", "duplicated", "failed_but_written",
        "without_offset"]
TOTALS = ["sent", "delivered", "failed", "lost", "reordered", "duplicated", "unresolved"]
SKIP = {"test", "function", "module", "doc", "written_at", "commit", "faults", "failed_by_cause", "actors_killed",
        "form", *MAIN}
UNCOUNTED_FAULTS = ("proxy/requests", "proxy/connections")  # traffic the proxy passed on, not faults


def _fmt(v: object) -> str:
    if v is None:  # a figure the scenario did not measure: said so, never a made-up 0
        return NOT_MEASURED
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in sorted(v.items())) or "none"
    if isinstance(v, list):
        return "; ".join(_fmt(x) for x in v) or "none"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _span(values: list[float], unit: str = "") -> str:
    """`low–high` (or the one value) of measured figures, or not measured."""
    if not values:
        return NOT_MEASURED
    low, high = min(values), max(values)
    return f"{_fmt(low)}{unit}" if low == high else f"{_fmt(low)}–{_fmt(high)}{unit}"


def expected_tests(test_dir: Path = HERE) -> list[tuple[str, str]]:
    """(module, function) of every chaos test that writes a record (takes the `record` fixture),
    read from the test files without importing them."""
    out = []
    for path in sorted(test_dir.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                    and any(a.arg == "record" for a in node.args.args)):
                out.append((path.stem, node.name))
    return out


def render(records: list[dict], form: str = "full", expected: list[tuple[str, str]] | None = None) -> str:
    """The report of `records`, a file of the `form` given; `expected`: the (module, function)
    of every test that should have a record (those without one are named)."""
    out = [INTRO]
    when = max((r.get("written_at", "") for r in records), default="")
    commits = sorted({r.get("commit", "unknown") for r in records})
    out.append(f"Records: {len(records)}, {form} form, last written {when or 'never'}, on commit "
               f"{', '.join(commits) or 'none'}.\n")
    other = [r for r in records if r.get("form") != form]
    if other:
        out.append(f"Records not of the {form} form ({len(other)}): "
                   + ", ".join(f"`{r['test']}` ({r.get('form', 'form unknown')})" for r in other) + ".\n")
    present = {(r.get("module"), r.get("function", r["test"].split("[", 1)[0])) for r in records}
    missing = [f"`{m}.{f}`" for m, f in expected or [] if (m, f) not in present]
    if missing:
        out.append(f"Tests with no record (failed, skipped or not run; {len(missing)}): " + ", ".join(missing) + ".\n")
    out.append("## Summary\n")
    out.append("| scenario | test | form | " + " | ".join(MAIN) + " | failed by cause | faults injected | actors killed |")
    out.append("|" + "---|" * (len(MAIN) + 6))
    for r in records:
        cells = [_fmt(r.get(k)) for k in MAIN]
        out.append(f"| {r['module'].replace('test_', '')} | {r['test'].replace('test_', '')} | {r.get('form', '?')} | "
                   + " | ".join(cells)
                   + f" | {_fmt(r.get('failed_by_cause', {}))} | {_fmt(r.get('faults', {}))} | "
                   f"{_fmt(r.get('actors_killed', []))} |")
    totals = []
    for k in TOTALS:
        measured = [int(r[k]) for r in records if r.get(k) is not None]
        note = "" if len(measured) == len(records) else f" (measured in {len(measured)} of {len(records)} records)"
        totals.append(f"{k} {sum(measured):,}{note}")
    out.append("\nTotals: " + ", ".join(totals) + ".\n")
    faults: dict[str, int] = {}
    for r in records:
        for k, v in (r.get("faults") or {}).items():
            if k not in UNCOUNTED_FAULTS:
                faults[k] = faults.get(k, 0) + int(v)
    out.append("Faults injected, all scenarios, by kind: " + _fmt(faults) + ".\n")
    killed = [a for r in records for a in r.get("actors_killed", [])]
    out.append(f"Actors killed: {len(killed)}.\n")
    out.extend(_outage_table(records))
    out.extend(_heal_table(records))
    for module, title in SCENARIOS.items():
        mine = [r for r in records if r.get("module") == module]
        if not mine:
            continue
        out.append(f"## {title}\n")
        for r in mine:
            out.append(f"### `{r['test']}` ({r.get('form', '?')} form, {r.get('written_at', 'when unknown')}, "
                       f"commit {r.get('commit', 'unknown')})\n")
            if r.get("doc"):
                out.append(" ".join(r["doc"].split()) + "\n")
            for k in MAIN:
                out.append(f"- {k}: {_fmt(r.get(k))}")
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
        cells = [f"{_fmt(r.get('failed'))} ({_fmt(r.get('failed_but_read'))})" if key is None else _fmt(r.get(key))
                 for _, key in OUTAGE_COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def _heal_table(records: list[dict]) -> list[str]:
    """Every producer heal the records hold, one row each, and their spans."""
    rows = [(r, i, h) for r in records for i, h in enumerate(r.get("heals") or [], 1)]
    if not rows:
        return []
    out = ["## Producer heals\n",
           "Each rebuild of a producer's pipeline after an actor died: *rebuild s*: from the death seen to "
           "the new pipeline sending; *found in log*: messages the dead pipeline had written but not reported, "
           "found in the log and ended as delivered; *sent again*: messages the new pipeline sent; *settled "
           "after kill s*: from the kill until every message had ended.\n",
           "| test | heal | actor killed | rebuild s | found in log | sent again | settled after kill s |",
           "|---|---|---|---|---|---|---|"]
    for r, i, h in rows:
        killed = r.get("actors_killed") or []
        out.append(f"| {r['test']} | {i} | {_fmt(killed[i - 1] if i <= len(killed) else None)} | "
                   f"{_fmt(h.get('seconds'))} | {_fmt(h.get('found_in_log'))} | {_fmt(h.get('sent_again'))} | "
                   f"{_fmt(r.get('seconds_to_settle_after_kill'))} |")
    settled = [r["seconds_to_settle_after_kill"] for r in records
               if r.get("heals") and r.get("seconds_to_settle_after_kill") is not None]
    out.append(f"\n{len(rows)} heals in {len({r['test'] for r, _, _ in rows})} records: rebuild "
               f"{_span([h['seconds'] for _, _, h in rows if h.get('seconds') is not None], ' s')}, found in log "
               f"{_span([h['found_in_log'] for _, _, h in rows if h.get('found_in_log') is not None])}, "
               f"every message ended {_span(settled, ' s')} after the kill.\n")
    return out


def load(records_dir: Path) -> list[dict]:
    """Every record in `records_dir`, in the scenarios' order, then by test."""
    records = [json.loads(p.read_text()) for p in sorted(records_dir.glob("*.json"))]
    order = list(SCENARIOS)
    records.sort(key=lambda r: (order.index(r["module"]) if r.get("module") in order else OTHER_SCENARIO, r["test"]))
    return records


def run_suite(records_dir: Path, full: bool) -> int:
    """Empty `records_dir` and run the whole chaos suite (slow tests too) into it; pytest's exit code."""
    for old in records_dir.glob("*.json"):
        old.unlink()
    command = [sys.executable, "-m", "pytest", "tests/chaos", "--run-slow", "-q", "-p", "no:hypothesispytest",
               *(["--chaos-full"] if full else [])]
    print("running:", " ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="empty the records folder and run the chaos suite first")
    parser.add_argument("--full", action="store_true",
                        help="the long form: run with --chaos-full, and render a file of the full form")
    parser.add_argument("--records", default=str(RECORDS))
    parser.add_argument("--out", default=str(ROOT / "RELIABILITY.md"))
    parser.add_argument("--notes", default=str(HERE / "NOTES.md"),
                        help="findings appended after the figures, if the file exists (prose: no figures of its own)")
    args = parser.parse_args()
    records_dir = Path(args.records)
    status = run_suite(records_dir, args.full) if args.run else 0
    records = load(records_dir)
    text = render(records, "full" if args.full else "short", expected_tests())
    notes = Path(args.notes)
    if notes.exists():
        text += "\n" + notes.read_text()
    Path(args.out).write_text(text)
    print(f"wrote {args.out} from {len(records)} records" + (f"; the chaos suite exited {status}" if status else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
