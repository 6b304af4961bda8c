"""Record-batch encode and decode rates (records/s) for 100-byte values, per codec and batch size.

Prints a Markdown table: median of 5 runs, each timed with time.perf_counter.
Run: python -m raykafka.app.bench.record_batches
"""

from __future__ import annotations

import os
import statistics
import time

from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.columns import BinaryColumn
from raykafka.wire.compression import Compression
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

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
    """One row per codec and batch size: records/s encoded from a list of bytes and from one
    buffer (the flusher's input), decoded to Record objects and to Arrow columns (the
    consumer's output), and the batch's bytes."""
    rows = []
    for codec in Compression:
        for n in BATCH_SIZES:
            values = _values(n)
            column = BinaryColumn.from_list(values)
            data = encode_record_batch(values, timestamps=1_700_000_000_000, compression=codec)
            assert encode_record_batch(column, timestamps=1_700_000_000_000, compression=codec) == data
            (batch,) = decode_record_batches(data)
            assert len(batch.records) == n and batch.records[-1].value == values[-1]
            assert records_to_arrow(data, "t", 0)[0].num_rows == n
            rows.append({
                "codec": codec.name.lower(), "records": n, "bytes": len(data),
                "encode": _rate(lambda v=values, c=codec: encode_record_batch(v, compression=c), n),
                "encode_column": _rate(lambda v=column, c=codec: encode_record_batch(v, compression=c), n),
                "decode": _rate(lambda d=data: decode_record_batches(d), n),
                "decode_arrow": _rate(lambda d=data: records_to_arrow(d, "t", 0), n),
            })
    return rows


HEADER = ["| codec | records/batch | encode from list | encode from one buffer | decode to Records | "
          "decode to Arrow | batch bytes |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]


def row(r: dict) -> str:
    return (f"| {r['codec']} | {r['records']:,} | {r['encode']:,.0f} | {r.get('encode_column', 0):,.0f} | "
            f"{r['decode']:,.0f} | {r.get('decode_arrow', 0):,.0f} | {r['bytes']:,} |")


def main() -> None:
    print("\n".join(HEADER))
    for r in measure():
        print(row(r))


if __name__ == "__main__":
    main()
