"""The CPU the whole run spent, kept in the run's JUnit XML (the suite's properties
`cpu_seconds` and `cpus`) for docs/tests.md's "Where the time goes": on C cores, work of N
core-seconds cannot end in under N / C seconds of wall time, whatever runs beside what.

Counted as this process's CPU and that of the processes it waited for, and theirs in turn
(`getrusage`, SELF and CHILDREN, user and system): Ray's raylet and GCS (`ray.shutdown` waits for
them) and the workers the raylet reaped, the broker, the CLI's subprocesses, Spark's JVM. A
process nobody waited for (one killed with its parent, and left to init) is not counted, so the
figure is a floor.

Called by: tests/conftest.py's session hooks. Calls: nothing of the package.
"""

from __future__ import annotations

import os
import resource

CPU_PROPERTY = "cpu_seconds"
CPUS_PROPERTY = "cpus"


def spent() -> float:
    """CPU seconds (user and system) of this process and of every process it waited for so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def cpus() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
