"""A benchmark run's `Settings`, and the `Row`s of what it measured, gathered in a `Report`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Settings:
    messages: int = 100_000
    runs: int = 3
    sizes: tuple[int, ...] = (100, 1024)
    codecs: tuple[str, ...] = ("none", "lz4")
    pipelines: int = 2  # parallel producer pipelines / group members
    latency_rates: tuple[int, ...] = (1000, 2000)  # msg/s
    latency_seconds: float = 5.0
    perf_seconds: int = 10
    spark: bool = False
    clients: tuple[str, ...] | None = None  # only these labels (by prefix); None: all
    record_batches: bool = True
    hot_paths: bool = True
    against: str | None = None  # a git revision whose hot paths run beside the current ones
    quick_mode: bool = False

    @classmethod
    def quick(cls) -> Settings:
        return cls(messages=5_000, runs=3, sizes=(100,), codecs=("none",), latency_seconds=1.0,
                   perf_seconds=2, record_batches=False, hot_paths=False, quick_mode=True)


@dataclass
class Row:
    kind: str  # "produce", "consume", "latency", "memory"
    client: str
    size: int
    codec: str
    rate: float  # msg/s (latency: p50 ms; memory: MiB)
    runs: list[float] = field(default_factory=list)  # seconds per run (latency: p99 ms)
    note: str = ""
    spread: dict[str, list[float]] = field(default_factory=dict)  # latency: each run's p50 and p99
    messages: int = 0  # messages per run, where not the settings' count


@dataclass
class Report:
    settings: Settings
    rows: list[Row] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)
    command: str = ""
    record_batches: list[dict[str, Any]] = field(default_factory=list)
    hot_paths: list[dict[str, Any]] = field(default_factory=list)
    against: str | None = None

    def find(self, kind: str, client: str, size: int = 100, codec: str = "none") -> Row | None:
        for row in self.rows:
            if row.kind == kind and row.client == client and row.size == size and row.codec == codec:
                return row
        return None
