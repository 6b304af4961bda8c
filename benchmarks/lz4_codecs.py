"""LZ4 on our record batches: the `lz4` package's frame codec beside cramjam's, both ways.

    python -m raykafka.benchmarks.lz4_codecs [--messages 1000000] [--per-batch 1000] [--runs 7]

The input is the records section of v2 record batches as the producer encodes them (100-byte
values, half random and half repeated, as in `record_batches.py`), `--per-batch` records to a
batch, `--messages` in all. Each codec compresses every batch, then decompresses every frame;
a run times the whole set once, codec after codec. Printed per codec: MB/s of uncompressed
records per CPU second (min / median / max over `--runs`), its ratio to the first codec's run by
run, and the frames' size. Every codec's frames are checked to decode to the input
with every other codec, so each writes a frame the others (and Kafka's readers) take.

Codecs: `lz4 frame` is the `lz4` package's frame writer with Kafka's flags (independent 64 KiB
blocks, no checksums, no content size), which wire/compression.py writes with, read back by
`LZ4FrameDecompressor` with `max_length`, its bound; `cramjam blocks` is cramjam's raw LZ4
blocks in the same frame written by hand (what wire/compression.py wrote before), read with
cramjam's `decompress_into` a buffer of the cap (what wire/compression.py reads with, the buffer
sized from the frame); `cramjam frame` is cramjam's own frame writer (a checksum on every block
and on the content), read the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import time
from collections.abc import Callable

import cramjam

from raykafka.wire.compression import LZ4_FRAME_HEADER, LZ4_STORED, Compression, compress
from raykafka.wire.record_encoding import encode_record_batch_parts

VALUE_SIZE = 100


def record_sections(messages: int, per_batch: int) -> list[bytes]:
    """The uncompressed records sections of `messages` records in batches of `per_batch`."""
    sections = []
    for start in range(0, messages, per_batch):
        n = min(per_batch, messages - start)
        values = [os.urandom(VALUE_SIZE // 2) + b"k" * (VALUE_SIZE // 2) for _ in range(n)]
        sections.append(bytes(encode_record_batch_parts(values, timestamps=1_700_000_000_000)[2]))
    return sections


def _cramjam_blocks(data: bytes) -> bytes:
    """The frame wire/compression.py writes, its blocks compressed by cramjam."""
    parts = [LZ4_FRAME_HEADER]
    for start in range(0, len(data), 64 * 1024):
        raw = data[start : start + 64 * 1024]
        block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        stored = len(block) >= len(raw)
        parts += [struct.pack("<I", len(raw) | LZ4_STORED if stored else len(block)), raw if stored else block]
    return b"".join(parts + [b"\0\0\0\0"])


def _cramjam_read(data: bytes, max_size: int) -> bytes:
    """cramjam's frame reader into a buffer of the cap (`max_size` + 1 bytes)."""
    out = bytearray(max_size + 1)
    return bytes(memoryview(out)[: cramjam.lz4.decompress_into(data, out)])


def _lz4_read(data: bytes, max_size: int) -> bytes:
    """The `lz4` package's frame reader, bounded: at most `max_size` + 1 bytes out."""
    import lz4.frame

    return lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=max_size + 1)


def codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes, int], bytes]]]:
    """name -> (compress, decompress(frame, max_size)); the first is what wire/compression.py writes with."""
    return {
        "lz4 frame": (lambda d: compress(Compression.LZ4, d), _lz4_read),
        "cramjam blocks": (_cramjam_blocks, _cramjam_read),
        "cramjam frame": (lambda d: bytes(cramjam.lz4.compress(d)), _cramjam_read),
    }


def measure(messages: int, per_batch: int, runs: int) -> list[dict]:
    """Per codec: MB/s of records compressed and decompressed in each run, and the frames' size.
    The codecs take turns within each run (A B C, A B C, ...), so a machine that speeds up or slows
    down between runs moves them alike; each is timed in this process's CPU seconds
    (`time.process_time`), which other processes on the machine do not add to."""
    sections = record_sections(messages, per_batch)
    total = sum(map(len, sections))
    cap = 2 * max(map(len, sections))
    table = codecs()
    frames = {name: [c(s) for s in sections] for name, (c, _d) in table.items()}
    for name, (_c, d) in table.items():  # every reader takes every writer's frames
        for writer, written in frames.items():
            assert [d(f, cap) for f in written[:50]] == sections[:50], (name, writer)
    rates: dict[str, dict[str, list[float]]] = {name: {"compress": [], "decompress": []} for name in table}
    for _ in range(runs):
        for name, (c, d) in table.items():
            started = time.process_time()
            for s in sections:
                c(s)
            rates[name]["compress"].append(total / (time.process_time() - started) / 1e6)
            started = time.process_time()
            for f in frames[name]:
                d(f, cap)
            rates[name]["decompress"].append(total / (time.process_time() - started) / 1e6)
    return [{"codec": name, "bytes_in": total, "bytes_out": sum(map(len, frames[name])), **rates[name]}
            for name in table]


def _spread(rates: list[float]) -> str:
    return f"{min(rates):,.0f} / {statistics.median(rates):,.0f} / {max(rates):,.0f}"


def _ratio(rates: list[float], base: list[float]) -> str:
    """Run by run, this codec's rate over the first codec's: min / median / max."""
    ratios = [r / b for r, b in zip(rates, base, strict=True)]
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--per-batch", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = measure(args.messages, args.per_batch, args.runs)
    print(f"{args.messages:,} records of {VALUE_SIZE} bytes in batches of {args.per_batch:,} "
          f"({rows[0]['bytes_in'] / 1e6:,.0f} MB of records); MB/s of records per CPU second, and the ratio "
          f"to `{rows[0]['codec']}` run by run: min / median / max of {args.runs} runs")
    print("| codec | compress MB/s | ratio | decompress MB/s | ratio | compressed / records |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base = rows[0]
    for r in rows:
        print(f"| {r['codec']} | {_spread(r['compress'])} | {_ratio(r['compress'], base['compress'])} | "
              f"{_spread(r['decompress'])} | {_ratio(r['decompress'], base['decompress'])} | "
              f"{r['bytes_out'] / r['bytes_in']:.3f} |")


if __name__ == "__main__":
    main()
