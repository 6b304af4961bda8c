"""The CPU the machine spent during the run, kept in the run's JUnit XML (the suite's properties
`cpu_seconds` and `cpus`) for docs/tests.md's "Where the time goes": on C cores, work of N
core-seconds cannot end in under N / C seconds of wall time, whatever runs beside what.

Read from Linux's `/proc/stat`: the time every core was busy (user, nice, system, interrupts;
not steal, the time a virtual machine's host took away), whoever used it. So it counts every process of the run, whoever started it and however
it ended (Ray's daemons and workers, the broker, Spark's JVM, the CLI's subprocesses), and also
anything else the machine ran meanwhile: on a machine that runs nothing else, as CI's, it is the
run's. (`getrusage` of the run's children is no substitute: it missed three quarters, the Ray
workers that no process of the run waits for.) Elsewhere nothing is kept.

Called by: tests/conftest.py's session hooks. Calls: nothing of the package.
"""

from __future__ import annotations

import os
from pathlib import Path

CPU_PROPERTY = "cpu_seconds"
CPUS_PROPERTY = "cpus"
STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (not idle, iowait, steal; guest is in user)


def busy_seconds(stat: Path = STAT) -> float | None:
    """Seconds the machine's cores have been busy since boot, summed over the cores; None
    where there is no /proc/stat."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:]]
    return sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks)) / os.sysconf("SC_CLK_TCK")


def cores(stat: Path = STAT) -> int:
    """The machine's cores, as /proc/stat counts them."""
    try:
        return sum(1 for line in stat.read_text().splitlines() if line.startswith("cpu") and line[3:4].isdigit()) or 1
    except OSError:
        return os.cpu_count() or 1
