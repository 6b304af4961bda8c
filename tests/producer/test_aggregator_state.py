"""The aggregator's batching rules (linger.ms, batch.size, batch.num.messages), without Ray."""

from __future__ import annotations

from raykafka.actors.aggregator import AggregatorState
from raykafka.actors.batch import FIN, Control, MessageBatch, ProduceSet

from ..reference import measured


def batch(partition: int, n: int, start: int = 0, size: int = 100, retries: int = 0) -> MessageBatch:
    return measured(MessageBatch(topic="t", partition=partition, ids=list(range(start, start + n)),
                                 values=[b"x" * size] * n, retries=retries))


def produce_sets(entries):
    return [e.batches for e in entries if isinstance(e, ProduceSet)]


def test_small_batches_linger_until_linger_ms():
    state = AggregatorState(linger_ms=10, batch_size=1 << 20, batch_num_messages=1000, max_request_size=1 << 20)
    assert state.add([batch(0, 5)], now=0.0) == []
    assert state.poll(now=0.005) == []
    sets = produce_sets(state.poll(now=0.010))
    assert len(sets) == 1 and [len(b) for b in sets[0]] == [5]
    assert state.deadline() is None


def test_a_full_batch_is_sent_at_once_with_everything_else_buffered():
    state = AggregatorState(linger_ms=1000, batch_size=1 << 20, batch_num_messages=10, max_request_size=1 << 20)
    assert state.add([batch(1, 3)], now=0.0) == []
    sets = produce_sets(state.add([batch(0, 10, start=100)], now=0.0))
    assert len(sets) == 1
    assert sorted((b.partition, len(b)) for b in sets[0]) == [(0, 10), (1, 3)]


def test_batch_size_cuts_a_large_batch_and_one_request_holds_one_batch_per_partition():
    state = AggregatorState(linger_ms=1000, batch_size=1000, batch_num_messages=10_000, max_request_size=1 << 20)
    sets = produce_sets(state.add([batch(0, 25, size=100)], now=0.0))  # ~121 bytes a record: 8 per batch
    assert all(len(s) == 1 for s in sets)
    sizes = [len(s[0]) for s in sets]
    assert sum(sizes) == 25 and max(sizes) <= 8 and len(sets) == 4
    ids = [i for s in sets for i in s[0].ids]
    assert ids == list(range(25))  # order kept


def test_max_request_size_splits_partitions_across_requests():
    state = AggregatorState(linger_ms=0, batch_size=1 << 20, batch_num_messages=10_000, max_request_size=2000)
    state.add([batch(0, 10), batch(1, 10), batch(2, 10)], now=0.0)  # ~1200 bytes each
    sets = produce_sets(state.poll(now=0.0))
    assert [[b.partition for b in s] for s in sets] == [[0], [1], [2]]


def test_a_retried_batch_is_never_merged_or_cut():
    state = AggregatorState(linger_ms=1000, batch_size=500, batch_num_messages=3, max_request_size=1 << 20)
    retried = batch(0, 5, retries=1)
    retried.base_sequence = 40
    sets = produce_sets(state.add([batch(0, 1, start=50), retried, batch(0, 1, start=60)], now=0.0))
    sets += produce_sets(state.drain())
    got = [(s[0].ids, s[0].retries, s[0].base_sequence) for s in sets]
    assert got == [([50], 0, -1), ([0, 1, 2, 3, 4], 1, 40), ([60], 0, -1)]


def test_a_chaser_flushes_what_is_buffered_and_stays_in_band():
    state = AggregatorState(linger_ms=1000, batch_size=1 << 20, batch_num_messages=1000, max_request_size=1 << 20)
    state.add([batch(0, 2)], now=0.0)
    out = state.add([MessageBatch.control("t", 0, FIN, retries=0), batch(0, 1, start=9)], now=0.0)
    assert [type(e) for e in out] == [ProduceSet, Control]
    assert out[0].batches[0].ids == [0, 1]
    assert [b.ids for s in produce_sets(state.drain()) for b in s] == [[9]]


def test_a_record_batch_holds_only_pieces_whose_sequences_run_on():
    """Pieces numbered 0-1 and 2-3 under one producer id share a record batch; a piece numbered
    under a new producer id (after the partition renumbered) starts its own."""
    state = AggregatorState(linger_ms=1000, batch_size=1 << 20, batch_num_messages=1000, max_request_size=1 << 20)
    pieces = [batch(0, 2, start=0), batch(0, 2, start=2), batch(0, 2, start=4)]
    for piece, (pid, numbering, seq) in zip(pieces, [(7, 0, 0), (7, 0, 2), (8, 1, 0)], strict=True):
        piece.producer_id, piece.numbering, piece.base_sequence = pid, numbering, seq
    sets = produce_sets(state.add(pieces, now=0.0)) + produce_sets(state.drain())
    got = [(b.ids, b.producer_id, b.numbering, b.base_sequence) for s in sets for b in s]
    assert got == [([0, 1, 2, 3], 7, 0, 0), ([4, 5], 8, 1, 0)]


def test_a_heals_resend_and_a_message_not_sent_before_are_never_one_record_batch():
    """A heal's resend (`possibly_written`, sent before the heal) followed by a fresh piece whose
    sequences run on: two record batches, so the fresh messages take neither the resend's flag
    (their time-out would say "outcome unknown") nor its older `created_ms` (their deadline)."""
    state = AggregatorState(linger_ms=1000, batch_size=1 << 20, batch_num_messages=1000, max_request_size=1 << 20)
    resend, fresh = batch(0, 2, start=0), batch(0, 2, start=2)
    resend.possibly_written, resend.created_ms, fresh.created_ms = True, 1000, 5000
    for piece, seq in ((resend, 0), (fresh, 2)):
        piece.producer_id, piece.base_sequence = 7, seq
    sets = produce_sets(state.add([resend, fresh], now=0.0)) + produce_sets(state.drain())
    got = [(b.ids, b.possibly_written, b.created_ms) for s in sets for b in s]
    assert got == [([0, 1], True, 1000), ([2, 3], False, 5000)]


def test_pieces_with_and_without_headers_join_into_one_record_batch_with_each_ones_headers():
    """Messages from `send` (no headers), a DataFrame's slice (encoded headers) and a cut of one,
    joined by the aggregator into one record batch, keep each record's own headers."""
    from raykafka.wire.columns import BinaryColumn
    from raykafka.wire.record_decoding import decode_record_batches
    from raykafka.wire.record_encoding import encode_header_lists, encode_record_batch

    lists = [[("a", b"1")], None, [("b", None), ("c", b"")]]
    with_headers = MessageBatch(topic="t", partition=0, ids=[3, 4, 5], values=BinaryColumn.from_list([b"x", b"y", b"z"]),
                                headers=encode_header_lists(lists))
    plain = MessageBatch(topic="t", partition=0, ids=[0, 1, 2], values=[b"p", b"q", b"r"])
    joined = MessageBatch.concat([plain, with_headers.slice(0, 2), with_headers.take([2])])
    assert len(joined) == 6
    records = decode_record_batches(encode_record_batch(joined.values, None, 1, joined.headers))[0].records
    assert [(r.value, r.headers) for r in records] == [
        (b"p", []), (b"q", []), (b"r", []), (b"x", [("a", b"1")]), (b"y", []), (b"z", [("b", None), ("c", b"")])]


def test_with_a_measured_compression_ratio_batch_size_counts_bytes_on_the_wire():
    """Once the Flusher has measured that a topic compresses to a tenth, a batch holds about ten
    times batch.size in record bytes, and a request counts what its batches will weigh on the wire."""
    state = AggregatorState(linger_ms=1000, batch_size=1000, batch_num_messages=10_000, max_request_size=3000)
    state.observe({"t": 0.1})
    assert state.ratios == {"t": 0.1 * 1.1}  # the estimate keeps a margin
    sets = produce_sets(state.add([batch(0, 200, size=100)], now=0.0))  # 121 bytes a record
    sizes = [len(b) for s in sets for b in s]
    assert sizes[0] == int(1000 / 0.11) // 121 == 75  # batch.size / 0.11 in record bytes
    assert sum(sizes) + sum(len(b) for s in produce_sets(state.drain()) for b in s) == 200
    state.add([batch(p, 60, size=100) for p in range(4)], now=0.0)
    sets = produce_sets(state.drain())
    assert [len(s) for s in sets] == [3, 1]  # ~860 bytes on the wire each: three fit in 3,000


def test_the_compression_ratio_estimate_stays_between_a_sixteenth_and_one_and_is_per_topic():
    state = AggregatorState(linger_ms=1000, batch_size=1000, batch_num_messages=10_000, max_request_size=1 << 20)
    state.observe({"t": 0.001, "u": 1.4})
    assert state.ratios == {"t": 1 / 16, "u": 1.0}
    sets = produce_sets(state.add([batch(0, 400, size=100)], now=0.0))
    assert len(sets[0][0]) == 16_000 // 121
    other = measured(MessageBatch(topic="v", partition=0, ids=list(range(25)), values=[b"x" * 100] * 25))
    assert max(len(b) for s in produce_sets(state.add([other], now=0.0)) for b in s) <= 8  # unmeasured: batch.size
    state.observe({"t": 0.5})  # data that compresses worse: the estimate follows at once
    assert state.ratios["t"] == 0.55
