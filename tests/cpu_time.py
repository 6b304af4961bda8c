"""The CPU the machine spent during the run, kept in the run's JUnit XML (the suite's properties
`cpu_seconds` and `cpus`) for docs/tests.md's "Where the time goes": on C cores, work of N
core-seconds cannot end in under N / C seconds of wall time, whatever runs beside what.

Read from Linux's `/proc/stat`: the time every core was busy (user, nice, system, interrupts;
not steal, the time a virtual machine's host took away), whoever used it. So it counts every process of the run, whoever started it and however
it ended (Ray's daemons and workers, the broker, Spark's JVM, the CLI's subprocesses), and also
anything else the machine ran meanwhile: on a machine that runs nothing else, as CI's, it is the
run's. (`getrusage` of the run's children is no substitute: it missed three quarters, the Ray
workers that no process of the run waits for.) Elsewhere nothing is kept.

`ProcessCpu` says whose it was: it samples every process below the run's own every
`SAMPLE_S`, in a thread of its own, and sums their CPU by kind (Ray's workers, Ray's daemons,
Spark's JVM, the broker, the CLI's subprocesses, the test processes themselves), kept as the
suite's property `cpu_by_process`. Each test's share is its pytest process's tree's CPU from
its setup to its teardown, as of the samples before them (`ProcessCpu.sampled`): the test
case's property `cpu_seconds`. Under pytest-xdist each parallel worker samples its own tree
(its Ray, broker and Spark), so a test is charged only what its own worker's processes spent.
A sample sees a process's CPU so far, so a process's last moments
(under `SAMPLE_S`), and a process that lives less, are missed: the kinds sum to less than the
machine's count.

Called by: tests/conftest.py's session and test hooks. Calls: nothing of the package.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

CPU_PROPERTY = "cpu_seconds"
CPUS_PROPERTY = "cpus"
PARALLEL_PROPERTY = "pytest_workers"  # pytest-xdist's parallel workers (1: none)
STAT = Path("/proc/stat")
PROCESS_PROPERTY = "cpu_by_process"
PROC = Path("/proc")
SAMPLE_S = 1.0
TEST_PROCESS = "the test processes (pytest and its parallel workers: the tests, the mock cluster, Ray's and Spark's drivers)"
# a pytest-xdist worker is `python -u -c "<this>"` (execnet's bootstrap), a whole word of its command line
PARALLEL_WORKER = "import sys;exec(eval(sys.stdin.readline()))"
# the kind of a process below the run's, by the first of these in its program and script (the
# first `HEAD_ARGS` words of its command line: the raylet's later arguments hold its agents'
# command lines, and Ray's agents and pool workers rename themselves "ray::...")
WORKERS = "Ray workers (every actor and task)"
HEAD_ARGS = 3
KINDS = (("raylet/raylet", "Ray: raylet"), ("gcs_server", "Ray: GCS"),
         ("DashboardAgent", "Ray: dashboard agent"), ("dashboard/agent", "Ray: dashboard agent"),
         ("RuntimeEnvAgent", "Ray: runtime env agent"), ("runtime_env/agent", "Ray: runtime env agent"),
         ("dashboard/dashboard.py", "Ray: dashboard head"), ("log_monitor", "Ray: log monitor"),
         ("autoscaler/_private/monitor.py", "Ray: autoscaler monitor"), ("java", "Spark's JVM"),
         ("pyspark", "Spark's Python workers"), ("default_worker.py", WORKERS), ("ray::", WORKERS),
         ("tansu", "tansu (the broker)"), ("pytest", "pytest subprocesses"), ("raykafka", "the CLI's subprocesses"))
OTHER = "other"
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


def kind_of(argv: list[str]) -> str:
    """A process's kind (`KINDS`), from its command line's words; a parallel worker of the run's
    runs tests as the run's own process does."""
    if PARALLEL_WORKER in argv:
        return TEST_PROCESS
    head = " ".join(argv[:HEAD_ARGS])
    return next((kind for marker, kind in KINDS if marker in head), OTHER)


class ProcessCpu:
    """The CPU of `root` (by default this process) and of every process below it, by kind.
    `start` samples every `SAMPLE_S` in a daemon thread until `stop`; `sample` takes one."""

    def __init__(self, root: int | None = None, proc: Path = PROC):
        self.root = root or os.getpid()
        self.proc = proc
        self.seen: dict[tuple[int, int], list] = {}  # (pid, start tick) -> [kind, CPU ticks so far]
        self.sampled = 0.0  # CPU seconds of all of them, as of the last sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="process-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, tuple[int, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return self.totals()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        stats = {}  # pid -> (parent, start tick, CPU ticks)
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) "
            stats[int(entry.name)] = (int(fields[1]), int(fields[19]), sum(int(f) for f in fields[11:13]))
        below = {self.root}
        for pid in sorted(stats, key=lambda p: (stats[p][1], p)):  # a parent starts before its child
            if stats[pid][0] in below:
                below.add(pid)
        for pid in below & stats.keys():
            _, started, ticks = stats[pid]
            known = self.seen.get((pid, started))
            if known is None:
                kind = TEST_PROCESS if pid == self.root else kind_of(self._argv(pid))
                self.seen[(pid, started)] = [kind, ticks]
            else:
                known[1] = ticks
        self.sampled = sum(ticks for _, ticks in self.seen.values()) / os.sysconf("SC_CLK_TCK")

    def _argv(self, pid: int) -> list[str]:
        try:
            return (self.proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return []

    def totals(self) -> dict[str, tuple[int, float]]:
        """kind -> (processes, CPU seconds), the most CPU first."""
        out: dict[str, list] = {}
        for kind, ticks in self.seen.values():
            entry = out.setdefault(kind, [0, 0.0])
            entry[0] += 1
            entry[1] += ticks / os.sysconf("SC_CLK_TCK")
        return {k: (n, round(secs, 1)) for k, (n, secs) in sorted(out.items(), key=lambda kv: -kv[1][1])}


def totals_json(totals: dict[str, tuple[int, float]]) -> str:
    return json.dumps(totals, separators=(",", ":"))
