"""Record-batch encode and decode rates (records/s) for 100-byte values, per codec and batch size.

Prints a Markdown table: median of 5 runs, each timed with time.perf_counter.
Run: python bench/record_batches.py
"""

from __future__ import annotations

import os
import statistics
import time

from raykafka.wire.compression import Compression
from raykafka.wire.records import decode_record_batches, encode_record_batch

VALUE_SIZE = 100
BATCH_SIZES = (1_000, 10_000)
RUNS = 5


def _values(n: int) -> list[bytes]:
    """Half random, half repeated bytes, so compression has something to do but not everything."""
    return [os.urandom(VALUE_SIZE // 2) + b"k" * (VALUE_SIZE // 2) for _ in range(n)]


def _rate(fn, records: int) -> float:
    """Median records/s of RUNS runs, each repeated until it lasts at least 0.2 s."""
    rates = []
    for _ in range(RUNS):
        loops = 0
        start = time.perf_counter()
        while True:
            fn()
            loops += 1
            elapsed = time.perf_counter() - start
            if elapsed >= 0.2:
                break
        rates.append(records * loops / elapsed)
    return statistics.median(rates)


def measure() -> list[dict]:
    """One row per codec and batch size: encode and decode records/s, and the batch's bytes."""
    rows = []
    for codec in Compression:
        for n in BATCH_SIZES:
            values = _values(n)
            data = encode_record_batch(values, timestamps=1_700_000_000_000, compression=codec)
            (batch,) = decode_record_batches(data)
            assert len(batch.records) == n and batch.records[-1].value == values[-1]
            enc = _rate(lambda v=values, c=codec: encode_record_batch(v, compression=c), n)
            dec = _rate(lambda d=data: decode_record_batches(d), n)
            rows.append({"codec": codec.name.lower(), "records": n, "encode": enc, "decode": dec,
                         "bytes": len(data)})
    return rows


def main() -> None:
    print("| codec | records/batch | encode records/s | decode records/s | batch bytes |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in measure():
        print(f"| {r['codec']} | {r['records']:,} | {r['encode']:,.0f} | {r['decode']:,.0f} | {r['bytes']:,} |")


if __name__ == "__main__":
    main()
