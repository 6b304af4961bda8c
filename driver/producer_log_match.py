"""What a `Producer` needs to heal its pipeline after an actor died: the batches it handed on,
kept until their messages end; which message each numbered record is; and what the log says
of those a dead actor left unanswered.

Cardinality: one `KeptBatches` and one `SequenceBook` per Producer, written by its sender and
results threads (`keep`, `add`, `prune`) and read by its healer, all under the Producer's lock.
`written_outcomes` is Ray-free and does no I/O; `read_log` asks the brokers.

Why the log is asked: a BrokerWorker that dies with Produce requests in flight leaves their outcome
unknown; the broker may have written them. Sent again they would be written twice. With
idempotence every record in the log names its producer id, epoch and sequence, and the
BrokerWorkers note which messages each numbered batch carries as they take it, before its
bytes go (`NumberedBatch`; polled with the outcomes, kept here in the `SequenceBook`), so a
record of the old pipeline is matched to its message exactly: by topic, partition, producer id,
epoch and sequence. Only a record whose note never reached the driver (its BrokerWorker died
before the driver polled it) is matched by what it holds:
the earliest unresolved message of the topic with the same key, value, headers, timestamp
(unless the topic stamps log-append time) and explicit partition, if any. Two such messages
differ in nothing the log shows. The rest are sent again, in id order, through the healed
pipeline. Without idempotence the log cannot tell whose records they are; the unresolved
messages are all sent again (at least once).

Where the log is read: a partition from after its last acknowledged offset, unless a message
older than the last acknowledged there is unresolved (`scan_starts`), and no earlier than
the first offset stamped at or after the oldest time its unresolved messages can carry
(ListOffsets by time, less `CLOCK_SKEW_MS`), so another producer's older data is skipped.

Fencing (KIP-360): the heal first asks InitProducerId for the old producer id's next epoch. A
broker that gives it (the mock cluster does) refuses the old epoch in a partition once a batch of
the new epoch lands there, so a dead BrokerWorker's request still on its way can be written only
until the heal's own first write to that partition. tansu refuses the bump (UNKNOWN_SERVER_ERROR)
and Kafka's coordinator answers a producer without `transactional.id` with a new id, so there
the new pipeline takes a new id and the old one is never fenced. Either way the log is read again until quiet
(`SETTLE_S`), which narrows the window; a read that cannot settle within `request.timeout.ms`
raises `HealScanIncomplete` and the heal tries again: it is never taken as complete.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..actors.batch import MessageBatch
from ..actors.idempotence import NumberedBatch
from ..actors.producer_results import Outcome
from ..actors.shared_column import SharedColumn, read_shared
from ..wire import fetch as wire_fetch  # called through their modules, which tests patch
from ..wire import producer_id as wire_producer_id
from ..wire.cluster import Cluster
from ..wire.columns import BinaryColumn
from ..wire.errors import KafkaError
from ..wire.fetch import WrittenRecord, high_watermarks, list_offsets
from ..wire.loop import LoopThread
from ..wire.record_batch import SEQUENCE_MASK
from ..wire.record_encoding import encode_header_lists
from .producer_ledger import Ledger

log = logging.getLogger("raykafka.producer.heal")

TopicPartition = tuple[str, int]


class Heal(NamedTuple):
    """One rebuild of a producer's pipeline, as `Producer.heals_done` lists them."""

    cause: str  # what was seen dead
    seconds: float  # from the rebuild's start until the messages went again
    found_in_log: int  # unanswered messages the log held, ended as delivered
    sent_again: int  # unanswered messages sent again through the new pipeline
    producer_ids: tuple[int, int]  # (old, new)
    bumped: bool = False  # the broker gave the old producer id a new epoch (KIP-360), fencing the old one


class KeptBatches:
    """The batches handed to the pipeline, in the order they were handed on, until every message
    of each has ended (their values stay referenced here, as their bytes stay counted in
    buffer.memory)."""

    def __init__(self) -> None:
        self.batches: deque[MessageBatch] = deque()
        self._pruned_at = 64  # prune once this many are kept; then at twice what was left

    def __len__(self) -> int:
        return len(self.batches)

    def keep(self, batches: Iterable[MessageBatch], ledger: Ledger) -> None:
        self.batches.extend(batches)
        if len(self.batches) >= self._pruned_at:
            self.prune(ledger)

    def prune(self, ledger: Ledger) -> None:
        """Drop the batches whose messages have all ended."""
        self.batches = deque(b for b in self.batches if len(ledger.open_positions(b.ids)))
        self._pruned_at = max(64, 2 * len(self.batches))

    def unresolved(self, ledger: Ledger) -> list[MessageBatch]:
        """The messages of the kept batches not yet ended, as batches in id order (each topic's
        order kept), fresh for a new pipeline: no partition, no sequence, no retry count. Each is
        `possibly_written`: the dead pipeline may have sent it, and a request of it may still
        land after the log was read, so its time running out is "outcome unknown", never "not
        delivered"."""
        out = []
        for part in still_open(self.batches, ledger):
            out.append(MessageBatch(topic=part.topic, ids=part.ids, values=part.values, keys=part.keys,
                                    timestamps=part.timestamps, headers=part.headers, partitions=part.partitions,
                                    created_ms=part.created_ms, nbytes=part.nbytes, possibly_written=True))
        self.batches = deque(out)
        return out


def still_open(batches: Iterable[MessageBatch], ledger: Ledger) -> list[MessageBatch]:
    """Each batch cut to its messages not yet ended (a batch with none left is dropped)."""
    out = []
    for batch in batches:
        idx = ledger.open_positions(batch.ids)
        if len(idx):
            out.append(batch if len(idx) == len(batch) else batch.take(idx.tolist()))
    return out


class AckedEnd(NamedTuple):
    """Where a partition's acknowledged messages end: the offset after the last, and the greatest
    message id acknowledged there."""

    offset: int
    last_id: int


def acked_ends(ends: dict[TopicPartition, AckedEnd], entries: Iterable[Outcome]) -> None:
    """Note in `ends` where each partition's acknowledged messages end (`AckedEnd`)."""
    for ids, topic, partition, first_offset, _append, error in entries:
        if error is None and first_offset >= 0 and len(ids):
            end, last = first_offset + len(ids), _greatest(ids)
            old = ends.get((topic, partition))
            if old is None or end > old.offset or last > old.last_id:
                ends[(topic, partition)] = AckedEnd(end, last) if old is None else \
                    AckedEnd(max(end, old.offset), max(last, old.last_id))


def _greatest(ids: Any) -> int:
    if isinstance(ids, range):
        return ids[-1] if ids.step > 0 else ids[0]
    if isinstance(ids, np.ndarray):
        return int(ids.max())
    return max(ids)


def scan_starts(ends: Mapping[TopicPartition, AckedEnd], unresolved: Iterable[MessageBatch], book: SequenceBook,
                is_open: Callable[[Any], np.ndarray]) -> dict[TopicPartition, int]:
    """The partitions whose log a heal may read from their acknowledged end: those where no
    unresolved message is older than the last one acknowledged there. In a partition the log
    holds a producer's messages in the order they were handed on (their ids), so only an older
    one may sit before that end: a batch answered with a retriable error after the broker had
    appended it (REQUEST_TIMED_OUT) while a later one was acknowledged. Such a partition is read
    from the time its unresolved messages carry instead (`read_log`). A noted message is
    counted in the partitions its notes name; one no note names, in every partition of its topic."""
    oldest: dict[TopicPartition | str, int] = {}  # (topic, partition), or a topic: the oldest open id there

    def note(where: TopicPartition | str, mid: int) -> None:
        if mid < oldest.get(where, mid + 1):
            oldest[where] = mid

    for (topic, partition, _pid, _epoch), notes in book.notes.items():
        for n in notes.values():
            idx = is_open(n.ids)
            if len(idx):
                note((topic, partition), int(np.asarray(n.ids)[idx].min()))
    noted = book.noted_ids()
    for batch in unresolved:
        unnoted = [int(i) for i in _id_list(batch.ids) if int(i) not in noted]
        if unnoted:
            note(batch.topic, min(unnoted))
    starts = {}
    for (topic, partition), end in ends.items():
        older = min(oldest.get((topic, partition), end.last_id + 1), oldest.get(topic, end.last_id + 1))
        if older > end.last_id:
            starts[(topic, partition)] = end.offset
    return starts


class SequenceBook:
    """Which message each sequence number of a numbered batch is: the BrokerWorkers' notes
    (`NumberedBatch`), kept until their messages end."""

    def __init__(self) -> None:
        # (topic, partition, producer id, epoch) -> {base sequence: note}
        self.notes: dict[tuple[str, int, int, int], dict[int, NumberedBatch]] = defaultdict(dict)
        self.count = 0  # notes kept
        self._sorted: dict[tuple[str, int, int, int], list[int]] = {}  # each key's bases, sorted, until it changes
        self._pruned_at = 1024  # prune once this many are kept; then at twice what was left

    def add(self, notes: Iterable[NumberedBatch], ledger: Ledger) -> None:
        """Keep these notes; once many are kept, drop those whose messages have all ended."""
        for note in notes:
            key = (note.topic, note.partition, note.producer_id, note.producer_epoch)
            self.notes[key][note.base_sequence] = note
            self._sorted.pop(key, None)
            self.count += 1
        if self.count >= self._pruned_at:
            self.prune(ledger.open_positions)
            self._pruned_at = max(1024, 2 * self.count)

    def prune(self, is_open: Callable[[Any], np.ndarray]) -> None:
        """Drop the notes whose messages have all ended (`is_open(ids)`: positions still open)."""
        for key in list(self.notes):
            kept = {base: n for base, n in self.notes[key].items() if len(is_open(n.ids))}
            if kept:
                self.notes[key] = kept
            else:
                del self.notes[key]
        self._sorted = {}
        self.count = sum(len(v) for v in self.notes.values())

    def message_at(self, topic: str, partition: int, producer_id: int, epoch: int, sequence: int) -> int | None:
        """The id of the message written as `sequence`, if a note says so: the note with the
        greatest base at or below it (sequences wrap at 2**31: then the greatest of all)."""
        notes = self.notes.get((topic, partition, producer_id, epoch))
        if not notes:
            return None
        key = (topic, partition, producer_id, epoch)
        bases = self._sorted.get(key)
        if bases is None:
            bases = self._sorted[key] = sorted(notes)
        at = bisect.bisect_right(bases, sequence) - 1
        note = notes[bases[at]]  # at == -1: the last, a base before the wrap
        place = (sequence - note.base_sequence) & SEQUENCE_MASK
        return int(note.ids[place]) if place < len(note.ids) else None

    def scan_plan(self, is_open: Callable[[Any], np.ndarray]) -> dict[TopicPartition, PartitionScan]:
        """Each partition with a noted message still open: whose records to look for there, and
        the oldest time they can carry."""
        plan: dict[TopicPartition, PartitionScan] = {}
        for (topic, partition, pid, epoch), notes in self.notes.items():
            for note in notes.values():
                if not len(is_open(note.ids)):
                    continue
                scan = PartitionScan(frozenset({(pid, epoch)}), note.earliest_ms)
                plan[(topic, partition)] = scan.join(plan.get((topic, partition)))
        return plan

    def noted_ids(self) -> set[int]:
        """Every message id a kept note names."""
        return {int(i) for notes in self.notes.values() for n in notes.values() for i in n.ids}

    def unnoted_scans(self, batches: Iterable[MessageBatch], writer: tuple[int, int]
                      ) -> dict[TopicPartition, PartitionScan]:
        """For each topic with an unresolved message of `batches` that no note names (a note
        lost with its BrokerWorker, or a message never numbered): every partition of it
        (`ALL_PARTITIONS`), for the records of `writer` (the old pipeline's producer id and
        epoch) and of every writer noted in the topic."""
        noted = self.noted_ids()
        out: dict[TopicPartition, PartitionScan] = {}
        for batch in batches:
            if all(int(i) in noted for i in batch.ids):
                continue
            writers = frozenset({writer} | {(pid, epoch) for (t, _, pid, epoch) in self.notes if t == batch.topic})
            scan = PartitionScan(writers, batch.earliest_ms())
            out[(batch.topic, ALL_PARTITIONS)] = scan.join(out.get((batch.topic, ALL_PARTITIONS)))
        return out


ALL_PARTITIONS = -1  # a scan plan's partition for "every partition of the topic"


class PartitionScan(NamedTuple):
    """What a heal looks for in one partition: records of these (producer id, epoch) pairs,
    stamped no earlier than `earliest_ms` (0: any time)."""

    writers: frozenset[tuple[int, int]]
    earliest_ms: int

    def join(self, other: PartitionScan | None) -> PartitionScan:
        if other is None:
            return self
        times = (self.earliest_ms, other.earliest_ms)
        return PartitionScan(self.writers | other.writers, 0 if 0 in times else min(times))


def written_outcomes(batches: Iterable[MessageBatch], written: Mapping[TopicPartition, list[WrittenRecord]],
                     book: SequenceBook | None = None) -> list[Outcome]:
    """The unresolved messages of `batches` (in id order) that the log holds (`written`: the old
    pipeline's records per partition), each as delivered at its record's offset (see the
    module's docstring): by the `book`'s notes where one names the record's sequence, else by
    what the record holds."""
    book = book or SequenceBook()
    open_ids: set[int] = set()
    rows: dict[int, tuple] = {}  # id -> (topic, key, value, headers, timestamp, explicit partition)
    for batch in batches:
        values, keys = _as_list(batch.values), _as_list(batch.keys)
        stamps, headers = batch.timestamp_list(), _header_rows(batch)
        parts = batch.partitions
        for i, mid in enumerate(_id_list(batch.ids)):
            open_ids.add(mid)
            rows[mid] = (batch.topic, None if keys is None else keys[i], values[i], headers[i], stamps[i],
                         -1 if parts is None else parts[i])
    found: list[Outcome] = []
    unnoted: list[tuple[str, int, WrittenRecord]] = []
    for (topic, partition), records in written.items():
        for rec in records:
            mid = book.message_at(topic, partition, rec.producer_id, rec.producer_epoch, rec.sequence)
            if mid is None:
                unnoted.append((topic, partition, rec))
            elif mid in open_ids:
                open_ids.discard(mid)
                found.append(Outcome([mid], topic, partition, rec.offset))
    if unnoted:  # matched by what they hold, among the messages no note names
        noted = book.noted_ids()
        waiting: dict[tuple, list[int]] = defaultdict(list)
        for mid in sorted(open_ids - noted):
            topic, key, value, headers, stamp, part = rows[mid]
            waiting[(topic, key, value, headers)].append(mid)
        for topic, partition, rec in unnoted:
            alike = waiting.get((topic, rec.key, rec.value, _encoded_headers(rec.headers)), [])
            here = [i for i, mid in enumerate(alike) if rows[mid][5] in (-1, partition)]
            # the earliest with the record's timestamp; else (a topic stamping log-append time) the earliest
            at = next((i for i in here if rows[alike[i]][4] == rec.timestamp), here[0] if here else None)
            if at is not None:
                found.append(Outcome([alike.pop(at)], topic, partition, rec.offset))
    return found


NO_HEADERS = b"\x00"  # a record's encoded headers when it has none: a count of 0


def _header_rows(batch: MessageBatch) -> list[bytes]:
    """Each record's headers as the record format encodes them."""
    return [NO_HEADERS] * len(batch) if batch.headers is None else batch.headers.to_list()


def _encoded_headers(headers: tuple) -> bytes:
    """A record's decoded headers, encoded again as `_header_rows` gives a message's."""
    column = encode_header_lists([list(headers)])
    return NO_HEADERS if column is None else column.to_list()[0]


def _id_list(ids: Any) -> list[int]:
    if isinstance(ids, range | np.ndarray):
        return [int(i) for i in ids]
    return list(ids)


def _as_list(column: Any) -> list | None:
    if column is None:
        return None
    if isinstance(column, SharedColumn):
        column = read_shared([column])[0]
    if isinstance(column, BinaryColumn):
        return column.to_list()
    return list(column)


SETTLE_S = 0.25  # the pause before the log is read again for records that landed late
CLOCK_SKEW_MS = 60_000  # how far a broker's log-append clock may lag ours: a scan starts this much earlier


class HealScanIncomplete(KafkaError):
    """The heal's read of the log did not settle within `request.timeout.ms`: what it found so far
    is not everything, so nothing it did not find may be sent again yet."""


class LogRead(NamedTuple):
    """What `read_log` found: the old pipeline's records per partition, and the old producer id's
    next epoch if the broker bumped it (KIP-360), else None."""

    records: dict[TopicPartition, list[WrittenRecord]]
    bumped: tuple[int, int] | None


def read_log(config: Any, plan: Mapping[TopicPartition, PartitionScan], ends: Mapping[TopicPartition, int],
             bump: tuple[int, int] | None) -> LogRead:
    """Bump `bump` (the old producer id and epoch) if the broker can, then read each planned
    partition for its writers' records, from its acknowledged end (`ends`, as `scan_starts` gives
    them) or the first offset
    stamped at or after its `earliest_ms` less `CLOCK_SKEW_MS`, whichever is later.

    A dead BrokerWorker's last requests may still be on their way when the log is first read: its
    process is gone, but the bytes it wrote to its socket reach the broker after it. So the
    log is read again, `SETTLE_S` after each read, from past what was found, until a read finds
    nothing more. All the reads together are bounded by `request.timeout.ms`; reads that have not
    settled by then raise `HealScanIncomplete`, so that a partial read is never taken as whole."""
    timeout = config["request.timeout.ms"] / 1000

    async def bumped(cluster: Cluster) -> tuple[int, int] | None:
        """The old id with its next epoch, if the broker gives it; else None (not fenced)."""
        if bump is None or bump[0] < 0:
            return None
        try:
            answer = await asyncio.wait_for(wire_producer_id.init_producer_id(cluster, bump), timeout)
        except (TimeoutError, KafkaError) as exc:
            log.info("heal: the broker did not bump producer %d's epoch %d (%s); its old epoch is not fenced",
                     bump[0], bump[1], exc)
            return None
        if answer[0] != bump[0] or answer[1] <= bump[1]:  # a new id (Kafka does so without a transactional.id)
            log.info("heal: asked to bump producer %d epoch %d, the broker gave %d epoch %d: the old epoch is not "
                     "fenced", *bump, *answer)
            return None
        return answer

    async def expand(cluster: Cluster) -> dict[TopicPartition, PartitionScan]:
        """The plan with each whole topic (`ALL_PARTITIONS`) as its partitions."""
        out: dict[TopicPartition, PartitionScan] = {}
        for (topic, partition), want in plan.items():
            if partition == ALL_PARTITIONS:
                for p in sorted((await cluster.topic(topic, refresh=True)).partitions):
                    out[(topic, p)] = want.join(out.get((topic, p)))
            else:
                out[(topic, partition)] = want.join(out.get((topic, partition)))
        return out

    async def starts(cluster: Cluster, wanted: Mapping[TopicPartition, PartitionScan]) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        by_topic: dict[str, dict[int, int]] = defaultdict(dict)
        for (topic, partition), want in wanted.items():
            by_topic[topic][partition] = want.earliest_ms
        for topic, parts in by_topic.items():
            await cluster.topic(topic, refresh=True)
            timed = [p for p, ms in parts.items() if ms > 0 and (topic, p) not in ends]
            at: dict[int, int] = {}
            for p in timed:  # one ListOffsets a partition: each asks its own time
                at.update(await list_offsets(cluster, topic, [p], max(0, parts[p] - CLOCK_SKEW_MS)))
            past_end = [p for p in timed if at.get(p, -1) < 0]  # no record that late: none of ours yet
            if past_end:
                at.update(await high_watermarks(cluster, topic, past_end))
            for p in parts:
                out[(topic, p)] = max(ends.get((topic, p), 0), at.get(p, 0))
        return out

    async def scan(cluster: Cluster) -> LogRead:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        new_epoch = await bumped(cluster)
        scans = await asyncio.wait_for(expand(cluster), max(0.0, deadline - loop.time()))
        start = await asyncio.wait_for(starts(cluster, scans), max(0.0, deadline - loop.time()))
        wanted = sorted(scans)
        found: dict[TopicPartition, list[WrittenRecord]] = defaultdict(list)
        first = True
        while True:
            read = await asyncio.gather(*(
                wire_fetch.records_of_producer(cluster, t, p, start[(t, p)], scans[(t, p)].writers,
                                    config["max.decompressed.batch.bytes"]) for t, p in wanted))
            for tp, records in zip(wanted, read, strict=True):
                if records:
                    found[tp].extend(records)
                    start[tp] = records[-1].offset + 1
            if not first and not any(read):
                return LogRead(dict(found), new_epoch)
            if loop.time() + SETTLE_S > deadline:
                raise HealScanIncomplete(
                    f"the log of {len(wanted)} partition(s) was still taking records of the old producer "
                    f"after request.timeout.ms={config['request.timeout.ms']}")
            first = False
            await asyncio.sleep(SETTLE_S)

    if not plan and bump is None:
        return LogRead({}, None)
    loop = LoopThread("raykafka-heal")
    cluster = Cluster(config)
    try:
        return loop.run(scan(cluster), timeout=3 * timeout + 5)
    finally:
        loop.run(cluster.close(), timeout=5)
        loop.stop()
