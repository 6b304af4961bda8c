"""The run's log lines, on stderr, written above its progress bar while it runs."""

from __future__ import annotations

import sys
import time
from typing import Any

PROGRESS: list[Any] = []  # the run's progress bar (app/progress.py), while run_suite runs


def log(msg: str) -> None:
    line = f"[bench {time.strftime('%H:%M:%S')}] {msg}"
    if PROGRESS and not PROGRESS[0].disable:
        PROGRESS[0].write(line, file=sys.stderr)  # above the bar, which is drawn again below
    else:
        print(line, file=sys.stderr, flush=True)
