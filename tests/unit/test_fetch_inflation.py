"""A fetch's compressed batches are bounded together, not only one by one: many batches, each
under `max.decompressed.batch.bytes`, may not inflate past what the fetch as a whole may
(`record_batch_reader.InflationBudget`), in both decoders, for one partition's part of an answer and for
every partition of an answer that one process decodes."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.compression import Compression
from raykafka.wire.config import parse_config
from raykafka.wire.errors import DecompressedFetchTooLargeError, RecordBatchTooLargeError
from raykafka.wire.fetcher import decode
from raykafka.wire.record_batch import HEADER_SIZE
from raykafka.wire.record_batch_reader import MAX_INFLATION, InflationBudget
from raykafka.wire.record_decoding import decode_record_batches
from raykafka.wire.record_encoding import encode_record_batch

MiB = 1 << 20
# snappy is left out: it inflates at most some 21 times, so no snappy fetch outgrows MAX_INFLATION
BOMB_CODECS = [Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def bombs(count: int, size: int, codec: Compression = Compression.ZSTD, base_offset: int = 0) -> bytes:
    """`count` batches of one record of `size` zero bytes each, compressed, one after another as
    a Fetch answer carries them: a few hundred bytes on the wire for each."""
    return b"".join(encode_record_batch([bytes(size)], timestamps=1, base_offset=base_offset + i, compression=codec)
                    for i in range(count))


@pytest.mark.parametrize("codec", BOMB_CODECS, ids=lambda c: c.name.lower())
def test_many_batches_each_under_the_batch_cap_are_refused_together(codec):
    """Twenty batches of 1 MiB each against a batch cap of 2 MiB: each alone is allowed; together
    they may inflate to the cap plus MAX_INFLATION times their few KiB, and the batch that tips
    the fetch over is refused, naming the partition, the batch and the bound."""
    data = bombs(20, MiB, codec)
    budget = 2 * MiB + MAX_INFLATION * len(data)
    assert budget < 12 * MiB  # well short of the 20 MiB they inflate to
    tipping = budget // MiB  # the batches before it fit
    for decoder in (lambda: records_to_arrow(data, "t", 3, max_decompressed=2 * MiB),
                    lambda: decode_record_batches(data, max_decompressed=2 * MiB)):
        with pytest.raises(DecompressedFetchTooLargeError) as caught:
            decoder()
        message = str(caught.value)
        assert f"record batch at offset {tipping}: {codec.name.lower()} data inflates past the " in message
        assert f"of the {budget} bytes this partition's part of the fetch may inflate to" in message
        assert f"max.decompressed.batch.bytes ({2 * MiB}) plus MAX_INFLATION ({MAX_INFLATION}) times " \
               f"its {len(data)} bytes" in message
        assert isinstance(caught.value, RecordBatchTooLargeError)  # a consumer fails the partition as for one batch
    with pytest.raises(DecompressedFetchTooLargeError, match=f"^t/3: record batch at offset {tipping}: "):
        records_to_arrow(data, "t", 3, max_decompressed=2 * MiB)


def test_a_budget_holds_exactly_its_limit():
    """Batches whose records inflate to exactly what is left are read, however many; one byte
    more is refused at the batch that needs it (an answer's budget of no fetched bytes: the
    batch cap alone)."""
    quarter = MiB // 4
    framing = len(encode_record_batch([bytes(quarter)], timestamps=1)) - HEADER_SIZE - quarter  # the record's own fields

    def batch(offset: int, inflated: int) -> bytes:
        return encode_record_batch([bytes(inflated - framing)], timestamps=1, base_offset=offset,
                                   compression=Compression.ZSTD)

    whole = [batch(i, quarter) for i in range(4)]
    answer = InflationBudget(0, MiB, "this fetch answer")
    assert records_to_arrow(b"".join(whole), "t", 0, max_decompressed=MiB, answer=answer)[0].num_rows == 4
    assert answer.left == 0
    over = b"".join(whole[:3]) + batch(3, quarter + 1)
    with pytest.raises(DecompressedFetchTooLargeError, match="^t/0: record batch at offset 3: zstd data inflates "
                                                             f"past the {quarter} bytes left of the {MiB} bytes"):
        records_to_arrow(over, "t", 0, max_decompressed=MiB, answer=InflationBudget(0, MiB, "this fetch answer"))


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name.lower())
def test_compressible_honest_batches_past_the_batch_cap_together_are_read(codec):
    """JSON log lines (zstd and gzip compress them some 6 times), in batches that together
    inflate to many times the batch cap: well within MAX_INFLATION times the fetched bytes, so
    all of it is read."""
    rng = random.Random(7)
    words = ["fetch", "commit", "rebalance", "produce", "ack", "retry", "leader", "offset", "partition", "events"]
    line = lambda: json.dumps({"ts": 1764150000000 + rng.randrange(10**6), "level": rng.choice(["INFO", "WARN"]),  # noqa: E731
                               "msg": " ".join(rng.choices(words, k=8)), "offset": rng.randrange(10**9)}).encode()
    values = [b"\n".join(line() for _ in range(500)) for _ in range(30)]
    data = b"".join(encode_record_batch([v], timestamps=1, base_offset=i, compression=codec)
                    for i, v in enumerate(values))
    cap = max(map(len, values)) + 64  # and each record's own fields
    assert sum(map(len, values)) > 10 * cap
    assert records_to_arrow(data, "t", 0, max_decompressed=cap)[0].column("value").to_pylist() == values


def test_the_partitions_of_one_answer_share_its_budget():
    """A fetch loop that decodes every partition of an answer in one process (a group member)
    passes the answer's budget to each partition's `fetcher.decode`: two partitions that each fit
    their own budget do not fit the answer's together, and the second is refused naming it."""
    config = parse_config({"bootstrap.servers": "h:1", "max.decompressed.batch.bytes": MiB})
    parts = {0: bombs(3, 300_000), 1: bombs(3, 300_000)}
    for partition, data in parts.items():  # alone, each partition's 900 kB fits its 1 MiB and some
        assert decode(data, "t", partition, 0, config)[0].num_rows == 3
    answer = InflationBudget(sum(map(len, parts.values())), MiB, "this fetch answer")
    assert answer.limit < 1.5 * MiB
    assert decode(parts[0], "t", 0, 0, config, answer)[0].num_rows == 3
    with pytest.raises(DecompressedFetchTooLargeError,
                       match=r"^t/1: record batch at offset 0: .* this fetch answer may inflate to"):
        decode(parts[1], "t", 1, 0, config, answer)


_CHILD = """
import json, resource, sys
from raykafka.wire.arrow_batches import records_to_arrow
from raykafka.wire.errors import DecodeError
data = open(sys.argv[1], "rb").read()
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
before = peak()
try:
    outcome = "read %d rows" % records_to_arrow(data, "t", 0)[0].num_rows
except DecodeError as e:
    outcome = "refused: %s" % e
print(json.dumps([outcome, peak() - before]))
"""


@pytest.mark.timeout(120)
def test_the_bomb_of_twenty_batches_costs_about_one_batch_cap(tmp_path):
    """The review's bomb: twenty zstd batches of 25 MiB of zeros each, a few KiB on the wire,
    against the default batch cap of 50 MiB. Each batch alone is allowed; decoded in a fresh
    process, the fetch is refused and the peak resident memory grows by about the cap (it grew
    by 1,517 MiB here before the fetch was bounded: all twenty inflated, then joined)."""
    path = tmp_path / "bomb"
    path.write_bytes(bombs(20, 25 * MiB))
    run = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                         timeout=100, check=False)
    assert run.returncode == 0, run.stderr
    outcome, grown = json.loads(run.stdout)
    assert outcome.startswith("refused: t/0: record batch at offset 2:"), outcome
    assert grown < 100 * MiB, f"peak memory grew by {grown / MiB:.0f} MiB"
