"""`tansu perf produce`: the broker's own ceiling, beside the clients' produce rows."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from .rows import Settings
from .workload import new_topic

PERF_LINE = re.compile(r"produce_duration_ms=")


def produce_tansu_perf(bootstrap: str, admin: Any, s: Settings, size: int, codec: str) -> list[float]:
    """`tansu perf produce` for `perf_seconds`: every produce call it logs carries batch-size records."""
    from raykafka.driver.embedded_broker import tansu_binary

    batch, times = 1000, []
    for _ in range(s.runs):
        t = new_topic(admin, "tansu-perf")
        cmd = [tansu_binary(), "perf", t, "--broker", f"tcp://{bootstrap}", "produce", "--batch-size", str(batch),
               "--record-size", str(size), "--producers", "2", "--duration", f"{s.perf_seconds}s"]
        env = {**os.environ, "RUST_LOG": "tansu_perf=debug", "NO_COLOR": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=s.perf_seconds + 60, env=env)
        calls = len(PERF_LINE.findall(out.stdout + out.stderr))
        if out.returncode or not calls:
            raise RuntimeError(f"tansu perf exited {out.returncode} after {calls} produce calls")
        times.append(s.perf_seconds * s.messages / (calls * batch))  # seconds per `messages` at its rate
    return times
