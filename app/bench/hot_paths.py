"""The producer's and consumer's hot paths alone, in this process (no broker, no actors).

    python -m raykafka.app.bench.hot_paths [--against GIT_REF]

`send` on the caller's side, `_resolve` (`Settlement.resolve` since driver/producer_settlement.py)
settling 20,000 single-message futures, `send_batch` turning a 20,000-row Arrow slice into
columns, `records_to_arrow` decoding ten record batches of 1,000 records, and LZ4 compressing a
megabyte of 1 KiB records. With `--against`, the same code
of that git revision (its driver/producer.py, wire/arrow_batches.py and wire/compression.py,
loaded beside the working tree's) runs interleaved with the current one, and the table shows
both and the speed-up. Medians of 9.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

N = 20_000


def _fake_producer(module: Any) -> Any:
    """A Producer with its caller-side state and no actors: what `send` and `_resolve` touch."""
    from raykafka.wire.serde import get_serializer

    p = module.Producer.__new__(module.Producer)
    if hasattr(module, "ProducerState"):  # the lock, conditions, flags and ledger in one object of their own
        p._state, p._acc = module.ProducerState(), module.Accumulator()
    else:
        p._lock = threading.Lock()
        p._cond = threading.Condition(p._lock)
        p._futures_condition = threading.Condition()
        p._settling, p._closed, p._stopping = 0, False, False
        if hasattr(module, "Ledger"):  # the ledger and the accumulator in modules of their own
            p._ledger, p._acc = module.Ledger(), module.Accumulator()
        else:
            p._pending, p._batches, p._batch_starts, p._finished = {}, {}, [], []
            p._unresolved_bytes = p._open_count = p._open_bytes = p._next_id = 0
            p._open = {}
    p._transactions = None
    p.heals_on_death, p._acked_ends = True, {}  # what settling a report costs a producer that heals
    p._bytes_values = p._bytes_keys = True
    p.value_serializer = p.key_serializer = get_serializer("bytes")
    p.max_request_size, p.buffer_memory = 1 << 20, 1 << 40
    p._successes = p._errors = None
    if not hasattr(module, "Settlement"):  # since driver/producer_settlement.py, the Settlement's
        p.on_delivery = None
    p._raw_arrow = (True, True)
    metrics = getattr(module, "ProducerMetrics", None)
    if metrics is not None:  # the figures every send and settled batch adds, in revisions that count them
        from raykafka.wire.config import parse_config

        p.name, p.config = "hot-path", parse_config({"bootstrap.servers": "127.0.0.1:9"})
        p.metrics = metrics(p, None)
    if hasattr(module, "Settlement"):  # outcomes ended and reported in a room of their own
        p._settlement = module.Settlement(p._state, "hot-path", p.metrics, True, None, False, False,
                                          lambda cause, pipeline: None, lambda: None)
    return p


def _send(module: Any) -> float:
    p = _fake_producer(module)
    send, value = p.send, b"x" * 100
    start = time.perf_counter()
    for _ in range(N):
        send("t", value)
    return N / (time.perf_counter() - start)


def _resolve(module: Any) -> float:
    p = _fake_producer(module)
    make = getattr(module, "MessageFuture", None) or module._MessageFuture  # its name before driver/message_futures.py
    state = getattr(p, "_state", None)  # None: a revision before driver/producer_state.py
    futures = [make(p._futures_condition if state is None else state.futures_condition) for _ in range(N)]
    if state is not None:
        pending = state.ledger.singles
    else:
        pending = p._ledger.singles if hasattr(module, "Ledger") else p._pending
    for i, f in enumerate(futures):
        pending[i] = (f, "t", 123, 121)
    from raykafka.actors.producer_results import Outcome  # a NamedTuple: read by field now, by place before

    entries = [Outcome(list(range(k, k + 2000)), "t", 0, k, -1, None) for k in range(0, N, 2000)]
    start = time.perf_counter()
    (p._settlement.resolve if hasattr(p, "_settlement") else p._resolve)(entries)
    rate = N / (time.perf_counter() - start)
    assert futures[-1].result(0).offset == N - 1
    return rate


def _columns(module: Any, table: Any) -> float:
    columns = getattr(module, "batch_columns", None) or module._columns  # its name before driver/producer_input.py
    start = time.perf_counter()
    try:
        columns(table, None, None, None, None, (True, True))
    except TypeError:  # a revision before the raw-bytes argument
        columns(table, None, None, None, None)
    return N / (time.perf_counter() - start)


def _decode(module: Any, data: bytes) -> float:
    start = time.perf_counter()
    batch, _ = module.records_to_arrow(data, "t", 0, 0)
    rate = batch.num_rows / (time.perf_counter() - start)
    return rate


def _lz4(module: Any, body: bytes) -> float:
    start = time.perf_counter()
    for _ in range(10):
        module.compress(3, body)
    return 10 * len(body) / 1e6 / (time.perf_counter() - start)


def _load(name: str, source: str) -> Any:
    path = os.path.join(tempfile.mkdtemp(), name.rsplit(".", 1)[-1] + ".py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cases() -> list[tuple[str, str, Any]]:
    import pyarrow as pa

    from raykafka.wire.record_encoding import encode_record_batch

    values = [os.urandom(50) + b"k" * 50 for _ in range(5 * N)]
    table = pa.table({"value": pa.array(values, pa.binary())}).slice(2 * N, N)
    big = [os.urandom(512) + b"k" * 512 for _ in range(10_000)]
    data100 = b"".join(encode_record_batch(values[i:i + 1000], base_offset=i, timestamps=1_700_000_000_000)
                       for i in range(0, 10_000, 1000))
    data1k = b"".join(encode_record_batch(big[i:i + 1000], base_offset=i, timestamps=1_700_000_000_000)
                      for i in range(0, 10_000, 1000))
    body = data1k[:len(data1k) // 10]  # about a megabyte of 1 KiB records
    return [
        ("`send` on the caller's side (msg/s)", "producer", _send),
        ("`_resolve`: 20,000 single-message futures settled (msg/s)", "producer", _resolve),
        ("`send_batch`: 20,000-row Arrow slice to columns (rows/s)", "producer", lambda m: _columns(m, table)),
        ("`records_to_arrow`: 100 B values (records/s)", "arrow", lambda m: _decode(m, data100)),
        ("`records_to_arrow`: 1 KiB values (records/s)", "arrow", lambda m: _decode(m, data1k)),
        ("LZ4: a megabyte of 1 KiB records compressed (MB/s)", "compression", lambda m: _lz4(m, body)),
    ]


def measure(against: str | None = None, runs: int = 9) -> list[dict[str, Any]]:
    """One row per hot path: its rate now, and with `against` the rate at that git revision."""
    import raykafka.driver.producer as producer
    import raykafka.wire.arrow_batches as arrow
    import raykafka.wire.compression as compression

    current = {"producer": producer, "arrow": arrow, "compression": compression}
    before: dict[str, Any] = {}
    if against:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for key, path, name in (("producer", "driver/producer.py", "raykafka.driver._bench_producer_before"),
                                ("arrow", "wire/arrow_batches.py", "raykafka.wire._bench_arrow_before"),
                                ("compression", "wire/compression.py", "raykafka.wire._bench_compression_before")):
            source = subprocess.run(["git", "-C", root, "show", f"{against}:{path}"], check=True,
                                    capture_output=True, text=True).stdout
            try:
                before[key] = _load(name, source)
            except ImportError as exc:  # the old module needs what the package no longer has
                print(f"hot paths: {path} at {against} does not load beside today's package: {exc}",
                      file=sys.stderr)
    rows = []
    for label, key, fn in cases():
        now, then = [], []
        for _ in range(runs):
            now.append(fn(current[key]))
            if key in before:
                then.append(fn(before[key]))
        rows.append({"path": label, "now": statistics.median(now),
                     "before": statistics.median(then) if then else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a git revision to compare with, e.g. HEAD")
    args = parser.parse_args()
    rows = measure(args.against)
    if args.against:
        print(f"| hot path | {args.against} | now | speed-up |\n| --- | ---: | ---: | ---: |")
        for r in rows:
            if r["before"] is None:  # that revision's module does not load beside today's package
                print(f"| {r['path']} | — | {r['now']:,.0f} | — |")
            else:
                print(f"| {r['path']} | {r['before']:,.0f} | {r['now']:,.0f} | {r['now'] / r['before']:.2f}× |")
    else:
        print("| hot path | rate |\n| --- | ---: |")
        for r in rows:
            print(f"| {r['path']} | {r['now']:,.0f} |")


if __name__ == "__main__":
    main()
