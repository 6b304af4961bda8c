"""How many Ray worker processes each test started, kept in the run's JUnit XML (the property
`ray_workers`) for docs/tests.md's "Where the time goes": a Ray actor is a process, and starting
processes is most of what the suite spends.

Counted from the log file Ray writes for every worker process it starts
(`python-core-worker-*.log` in each Ray session's `logs/`, under Ray's temp directory), so the
workers of every Ray a test starts count: the run's own, a multi-node `Cluster`, a subprocess's
(the CLI's, the demo's). Sessions that were there before the run are left out. A module's
fixtures count in its first test, as its time does.

Called by: tests/conftest.py's runtest hooks. Calls: nothing of the package.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

PROPERTY = "ray_workers"
WORKER_LOGS = "python-core-worker-*.log"
SETTLED_NS = 1_000_000_000  # a directory's mtime this old (ns) says all there is in it


def ray_temp_dir() -> Path:
    """Where Ray keeps its sessions: `RAY_TMPDIR`, else the system's temp directory, then `ray`."""
    return Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"


class WorkerCount:
    """Ray worker processes started since it was made, on this machine.

    Ray's directory is listed again only when a session was added to it, and a session's `logs/`
    counted again only when a file was added to it (their modification times), so that a test
    costs a few `stat` calls, not a listing of every worker log of the run. A directory's time is
    the kernel's coarse clock, so one changed less than `SETTLED_NS` ago is looked at again
    anyway: a file added in the same tick as the last look would not move it."""

    def __init__(self, root: Path | None = None):
        self.root = root or ray_temp_dir()
        self.earlier = set(self._all_sessions())
        self.listed: tuple[int, list[Path]] = (-1, [])  # Ray's directory's mtime (ns), the run's sessions
        self.counted: dict[Path, tuple[int, int]] = {}  # a session's logs/ -> (its mtime in ns, workers)

    def started(self) -> int:
        return sum(self._workers(session / "logs") for session in self._sessions())

    def _all_sessions(self) -> list[Path]:
        try:  # session_<date>...; `session_latest` is a link to one of them
            return [p for p in self.root.iterdir() if p.name.startswith("session_") and not p.is_symlink()]
        except OSError:
            return []

    def _sessions(self) -> list[Path]:
        try:
            mtime = self.root.stat().st_mtime_ns
        except OSError:
            return []
        if mtime != self.listed[0] or _recent(mtime):
            self.listed = (mtime, [p for p in self._all_sessions() if p not in self.earlier])
        return self.listed[1]

    def _workers(self, logs: Path) -> int:
        try:
            mtime = logs.stat().st_mtime_ns
        except OSError:
            return 0
        known = self.counted.get(logs)
        if known is None or known[0] != mtime or _recent(mtime):
            known = self.counted[logs] = (mtime, sum(1 for _ in logs.glob(WORKER_LOGS)))
        return known[1]


def _recent(mtime_ns: int) -> bool:
    return time.time_ns() - mtime_ns < SETTLED_NS
