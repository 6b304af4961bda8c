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
from pathlib import Path

PROPERTY = "ray_workers"
WORKER_LOGS = "python-core-worker-*.log"


def ray_temp_dir() -> Path:
    """Where Ray keeps its sessions: `RAY_TMPDIR`, else the system's temp directory, then `ray`."""
    return Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"


class WorkerCount:
    """Ray worker processes started since it was made, on this machine."""

    def __init__(self, root: Path | None = None):
        self.root = root or ray_temp_dir()
        self.earlier = set(self._sessions())

    def _sessions(self) -> list[Path]:
        try:  # session_<date>...; `session_latest` is a link to one of them
            return [p for p in self.root.iterdir() if p.name.startswith("session_") and not p.is_symlink()]
        except OSError:
            return []

    def started(self) -> int:
        return sum(sum(1 for _ in (s / "logs").glob(WORKER_LOGS)) for s in self._sessions() if s not in self.earlier)
