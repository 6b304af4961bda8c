"""Where the suite's time goes, from a run's JUnit XML: the section "Where the time goes" of
docs/tests.md is written by this, never by hand.

    python -m pytest --junitxml=run.xml            # the run measured (the README's test command)
    python -m pytest --run-slow -m "slow or fuzz" --junitxml=slow.xml   # the slow tier alone
    python -m raykafka.tests.timings run.xml --slow slow.xml --out docs/tests.md
    python -m raykafka.tests.timings run.xml --record tests/records/suite-run.xml.gz

The runs behind today's section are kept, trimmed to each test's name, time, outcome, the Ray
worker processes it started and the CPU its pytest process's tree spent meanwhile (`--record`), in
tests/records/suite-run.xml.gz and tests/records/slow-run.xml.gz (gzip is read as it is). The
processes are counted by tests/processes.py, the CPU by tests/cpu_time.py; a record made before
they were counted has none, and the tables leave the column out.

Called by: a contributor, after a run; tests/scheduling.py (`cases`, to order a parallel run by
the kept one). Calls: nothing of the package; reads the XML pytest wrote.
Each test's time is pytest's (its setup, call and teardown), so a module's first test carries
the module's fixtures (a Ray, a Spark session, a broker) and the breakdown names them so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from .cpu_time import CPU_PROPERTY, CPUS_PROPERTY, PARALLEL_PROPERTY, PROCESS_PROPERTY, SAMPLE_S
from .processes import PROPERTY

HEADING = "## Where the time goes"
SLOWEST_MODULES = 15
SLOWEST_TESTS = 20
SLOWEST_SLOW_TESTS = 10
MESSAGE_CHARS = 300  # of a failure's or skip's message, in a record
SUITE_FIELDS = ("name", "errors", "failures", "skipped", "tests", "time", "timestamp")


class Case(NamedTuple):
    module: str  # tests/<dir>/<file>.py
    name: str
    seconds: float
    outcome: str  # passed, failed, error, skipped
    workers: int | None  # Ray worker processes it started (tests/processes.py); None when not counted
    cpu: float | None = None  # its pytest process's tree's CPU seconds, setup to teardown (tests/cpu_time.py)


def _suite(path: Path) -> ET.Element:
    """The run's `testsuite` element, from a JUnit XML file (gzipped or not)."""
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
        root = ET.parse(f).getroot()
    return root if root.tag == "testsuite" else root.find("testsuite")


def _workers_of(case: ET.Element) -> ET.Element | None:
    """A test case's `ray_workers` property (tests/processes.py), if it was counted."""
    return case.find(f"properties/property[@name='{PROPERTY}']")


def _cpu_of(case: ET.Element) -> ET.Element | None:
    """A test case's `cpu_seconds` property (tests/cpu_time.py), if it was counted."""
    return case.find(f"properties/property[@name='{CPU_PROPERTY}']")


def cpu_of(path: Path) -> tuple[float, int] | None:
    """The run's CPU seconds and the cores it had (tests/cpu_time.py), if the run counted them."""
    props = {p.get("name"): p.get("value") for p in _suite(path).findall("properties/property")}
    if CPU_PROPERTY not in props:
        return None
    return float(props[CPU_PROPERTY]), int(props.get(CPUS_PROPERTY) or 1)


def parallel_of(path: Path) -> int:
    """How many pytest processes ran the tests side by side (pytest-xdist's workers; 1 without)."""
    props = {p.get("name"): p.get("value") for p in _suite(path).findall("properties/property")}
    return int(props.get(PARALLEL_PROPERTY) or 1)


def cpu_by_process_of(path: Path) -> dict[str, tuple[int, float]] | None:
    """The run's CPU by kind of process (tests/cpu_time.py's `ProcessCpu`), if the run sampled it."""
    props = {p.get("name"): p.get("value") for p in _suite(path).findall("properties/property")}
    if PROCESS_PROPERTY not in props:
        return None
    return {kind: (int(n), float(secs)) for kind, (n, secs) in json.loads(props[PROCESS_PROPERTY]).items()}


def cases(path: Path) -> tuple[list[Case], float]:
    """Every test case of the run, and the run's wall time as pytest reported it."""
    suite = _suite(path)
    found = []
    for case in suite.iter("testcase"):
        outcome = next((kind for kind in ("failure", "error", "skipped") if case.find(kind) is not None), "passed")
        counted, cpu = _workers_of(case), _cpu_of(case)
        found.append(Case(module_of(case.get("classname", "")), case.get("name", ""), float(case.get("time", 0.0)),
                          outcome, None if counted is None else int(counted.get("value", "0")),
                          None if cpu is None else float(cpu.get("value", "0"))))
    return found, float(suite.get("time", 0.0))


def record(source: Path, target: Path) -> None:
    """`source`, a run's JUnit XML, trimmed for tests/records/ and gzipped into `target`: the
    suite's totals, and each test's name, time, outcome (its message cut to 300 characters), Ray
    worker processes and CPU."""
    suite = _suite(source)
    out = ET.Element("testsuites")
    kept = ET.SubElement(out, "testsuite", {k: v for k, v in suite.attrib.items() if k in SUITE_FIELDS})
    props = [p for p in suite.findall("properties/property") if p.get("name") in (CPU_PROPERTY, CPUS_PROPERTY, PARALLEL_PROPERTY, PROCESS_PROPERTY)]
    if props:
        held = ET.SubElement(kept, "properties")
        for prop in props:
            ET.SubElement(held, "property", dict(prop.attrib))
    for case in suite.iter("testcase"):
        trimmed = ET.SubElement(kept, "testcase", {k: case.get(k, "") for k in ("classname", "name", "time")})
        counted = [prop for prop in (_workers_of(case), _cpu_of(case)) if prop is not None]
        if counted:
            held = ET.SubElement(trimmed, "properties")
            for prop in counted:
                ET.SubElement(held, "property", dict(prop.attrib))
        for kind in ("failure", "error", "skipped"):
            outcome = case.find(kind)
            if outcome is not None:
                ET.SubElement(trimmed, kind, {"message": (outcome.get("message") or "")[:MESSAGE_CHARS]})
    with gzip.open(target, "wb") as f:
        f.write(ET.tostring(out, encoding="utf-8", xml_declaration=True))


def module_of(classname: str) -> str:
    """`tests/producer/test_x.py` from a JUnit classname (`tests.producer.test_x`, with a class
    or a package prefix or not)."""
    parts = classname.split(".")
    if "tests" in parts:
        parts = parts[parts.index("tests"):]
    files = [i for i, part in enumerate(parts) if part.startswith("test_")]
    return "/".join(parts[:files[0] + 1]) + ".py" if files else classname


def section(found: list[Case], wall: float, source: str, cpu: tuple[float, int] | None = None,
            by_process: dict[str, tuple[int, float]] | None = None, parallel: int = 1) -> str:
    """The section's Markdown: totals (with `cpu`, the run's CPU seconds and cores; `parallel`,
    the pytest processes that ran the tests side by side), each folder, whose the CPU was
    (`by_process`), the modules that cost the most, the slowest tests."""
    by_dir: dict[str, list[Case]] = defaultdict(list)
    by_module: dict[str, list[Case]] = defaultdict(list)
    for case in found:
        by_dir[case.module.rsplit("/", 1)[0]].append(case)
        by_module[case.module].append(case)
    ran = [c for c in found if c.outcome != "skipped"]
    failed = [c for c in ran if c.outcome != "passed"]
    workers_counted = any(c.workers is not None for c in found)
    cpu_counted = any(c.cpu is not None for c in found)

    def columns(group: list[Case]) -> str:  # the optional columns of a row: its CPU, its Ray processes
        return ((f" {_cpu(group):,.0f} |" if cpu_counted else "") + (f" {_workers(group):,} |" if workers_counted else ""))

    heads = (" CPU seconds |" if cpu_counted else "") + (" Ray processes |" if workers_counted else "")
    aligns = " ---: |" * heads.count("|")
    out = [HEADING, "",
           f"Written by `python -m raykafka.tests.timings` from `{source}`, a run of "
           f"`python -m pytest`: {len(ran):,} tests ran"
           + (f" ({len(failed):,} failed: {', '.join(_cell(c.module + '::' + c.name) for c in failed)})" if failed else "")
           + f" and {len(found) - len(ran):,} were skipped in "
           f"{wall:,.0f} s of wall time"
           + (f", by {parallel} pytest processes side by side (pytest-xdist; a module's tests all in one): the "
              f"tests took {sum(c.seconds for c in found):,.0f} s between them" if parallel > 1 else
              f", {sum(c.seconds for c in found):,.0f} s of it in the tests")
           + " (their setup, call and teardown; a module's fixtures are counted in its first test)."
           + (f" They started {_workers(found):,} Ray worker processes (tests/processes.py), each a Python "
              "interpreter that imports Ray: every actor runs in one of its own." if workers_counted else "")
           + (f" The machine's {cpu[1]} cores were busy {cpu[0]:,.0f} s of CPU meanwhile (tests/cpu_time.py), "
              f"{cpu[0] / (cpu[1] * wall):.0%} of what they could give: if the machine ran nothing else, this "
              f"work cannot end in under {cpu[0] / cpu[1]:,.0f} s on {cpu[1]} cores, whatever runs in "
              "parallel." if cpu and wall > 0 else "")
           + (f" A test's CPU is that of its pytest process and every process below it (its Ray, broker "
              f"and Spark), sampled every {SAMPLE_S:g} s, from its setup to its teardown: {_cpu(found):,.0f} s "
              "in the tests." if cpu_counted else ""), "",
           "| folder | tests | seconds | share |" + heads,
           "| --- | ---: | ---: | ---: |" + aligns]
    total = sum(c.seconds for c in found) or 1.0
    for folder, group in sorted(by_dir.items(), key=lambda kv: -sum(c.seconds for c in kv[1])):
        spent = sum(c.seconds for c in group)
        out.append(f"| {folder} | {len(group):,} | {spent:,.0f} | {spent / total:.0%} |" + columns(group))
    if by_process:
        sampled = sum(secs for _, secs in by_process.values())
        out += ["", f"Whose CPU it was: each process below the run's, sampled every {SAMPLE_S:g} s by "
                f"kind (tests/cpu_time.py). The kinds sum to {sampled:,.0f} s"
                + (f" of the {cpu[0]:,.0f} s the machine counted" if cpu else "")
                + f": a sample misses a process's last {SAMPLE_S:g} s, and what anything else on the machine ran.", "",
                "| process | processes | CPU seconds | share |", "| --- | ---: | ---: | ---: |"]
        out += [f"| {kind} | {n:,} | {secs:,.0f} | {secs / (sampled or 1):.0%} |" for kind, (n, secs) in
                sorted(by_process.items(), key=lambda kv: -kv[1][1])]
    cost = _cpu if cpu_counted else (lambda group: sum(c.seconds for c in group))
    out += ["", f"The {SLOWEST_MODULES} modules that spent the most "
            + ("CPU (the floor under the run's time):" if cpu_counted else "time:"), "",
            "| module | tests | seconds |" + heads, "| --- | ---: | ---: |" + aligns]
    modules = sorted(by_module.items(), key=lambda kv: -cost(kv[1]))[:SLOWEST_MODULES]
    out += [f"| {m} | {len(g):,} | {sum(c.seconds for c in g):,.0f} |" + columns(g) for m, g in modules]
    out += ["", f"The {SLOWEST_TESTS} slowest tests:", "", "| test | seconds |", "| --- | ---: |"]
    slowest = sorted(found, key=lambda c: -c.seconds)[:SLOWEST_TESTS]
    out += [f"| {c.module}::{_cell(c.name)} | {c.seconds:,.1f} |" for c in slowest]
    return "\n".join(out) + "\n"


def slow_section(found: list[Case], wall: float, source: str) -> str:
    """The slow tier's part of the section: its totals and its slowest tests."""
    ran = [c for c in found if c.outcome != "skipped"]
    out = ["### The slow tier", "",
           f"A run of the slow tier alone (`{source}`): "
           f"{len(ran):,} ran and {len(found) - len(ran):,} were skipped in {wall:,.0f} s of wall time"
           + (f", and started {_workers(found):,} Ray worker processes." if any(c.workers is not None for c in found)
              else "."), "",
           f"Its {SLOWEST_SLOW_TESTS} slowest tests:", "", "| test | seconds |", "| --- | ---: |"]
    slowest = sorted(found, key=lambda c: -c.seconds)[:SLOWEST_SLOW_TESTS]
    out += [f"| {c.module}::{_cell(c.name)} | {c.seconds:,.1f} |" for c in slowest]
    return "\n".join(out) + "\n"


def _workers(group: list[Case]) -> int:
    return sum(c.workers or 0 for c in group)


def _cpu(group: list[Case]) -> float:
    return sum(c.cpu or 0.0 for c in group)


def _cell(text: str) -> str:
    return text.replace("|", "/")


def replace_section(page: str, new: str) -> str:
    """`page` with its section `HEADING` (to the next `## ` heading or the end) replaced by
    `new`, or `new` appended."""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(page):
        return pattern.sub(lambda _: new + "\n", page, count=1).rstrip("\n") + "\n"
    return page.rstrip("\n") + "\n\n" + new


def main() -> int:
    parser = argparse.ArgumentParser(description="Where the suite's time goes, from a JUnit XML file.")
    parser.add_argument("junit")
    parser.add_argument("--slow", help="the JUnit XML of a run of the slow tier alone, for its part")
    parser.add_argument("--out", help="the page whose section it rewrites (default: print it)")
    parser.add_argument("--record", help="write the run, trimmed and gzipped, here (tests/records/) and stop")
    args = parser.parse_args()
    if args.record:
        record(Path(args.junit), Path(args.record))
        return 0
    found, wall = cases(Path(args.junit))
    text = section(found, wall, args.junit, cpu_of(Path(args.junit)), cpu_by_process_of(Path(args.junit)),
                   parallel_of(Path(args.junit)))
    if args.slow:
        text += "\n" + slow_section(*cases(Path(args.slow)), args.slow)
    if args.out:
        page = Path(args.out)
        page.write_text(replace_section(page.read_text(), text))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
