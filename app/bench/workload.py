"""What every client's rows share: the fresh topics each run writes to (dropped after each row),
the values and keys written, raykafka's producer config, and the paced sends and percentiles
of the latency rows."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from .run_log import log

PARTITIONS = 6

KEYS = [b"key-%02d" % i for i in range(100)]  # the keyed rows: 100 distinct keys, in turn


_CREATED: list[str] = []  # topics made since the last `drop_topics`


def new_topic(admin: Any, label: str, partitions: int = PARTITIONS) -> str:
    name = f"bench-{re.sub('[^a-z0-9]+', '-', label.lower())[:24]}-{uuid.uuid4().hex[:6]}"
    admin.create_topics({name: partitions})
    _CREATED.append(name)
    return name


def drop_topics(admin: Any) -> None:
    """Delete the topics made since the last call. The embedded broker keeps every record in
    memory and a full run writes gigabytes (tansu perf alone over 2 GB at 1 KiB): each row
    should meet a broker that holds only what it reads."""
    names, _CREATED[:] = list(_CREATED), []
    if names:
        try:
            admin.delete_topics(names, missing_ok=True)
        except Exception as exc:  # a broker that cannot delete still serves the next row
            log(f"could not delete {len(names)} topics: {exc}")


def value_of(size: int) -> bytes:
    """A value half random, half repeated bytes, so compression has something to do."""
    half = size // 2
    return os.urandom(half).hex().encode()[:half] + b"x" * (size - half)


def raykafka_config(bootstrap: str, codec: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "acks": 1, "compression.type": codec, **extra}


def paced(count: int, rate: int, send: Callable[[float], None], idle: Callable[[float], None]) -> None:
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            idle(due - now)
        send(time.perf_counter())


def percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return p(0.50), p(0.99)
