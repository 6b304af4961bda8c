"""The requests: Fetch and ListOffsets bodies and offset look-ups, with no fetch state and no loop.

Fetch is spoken at v12 at most: v13+ names topics by id, which our metadata does not keep.
Where a partition ends comes from a Fetch response's high watermark, not from
ListOffsets(latest), which some brokers (tansu 0.6) under-report. Under
`isolation.level=read_committed` a partition ends at its last stable offset (the Fetch
response's, asked at isolation level 1; ListOffsets is asked at that level too), so `latest`
and the ends of bounded reads stop where a read_committed reader stops.

`find_batch_offset` serves the producer's Flusher: where a batch the broker took without an
offset (tansu 0.6 answers a re-sent idempotent batch DUPLICATE_SEQUENCE_NUMBER, base offset -1)
lies in the log, found by its producer id, epoch and first sequence. `records_of_producer` serves
a producer healing its pipeline: the records one producer id wrote from an offset on. Both read
the log forward through a `LogScan`, which owns their bounds and what a broker's answer means.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import Any, NamedTuple

from . import messages
from .config import Config
from .errors import BY_NAME, BrokerError, DecodeError, LookupTimeoutError
from .record_batch import LENGTH_OFFSET, SEQUENCE_MASK
from .record_batch_reader import read_batch_header
from .record_decoding import decode_record_batches

FETCH_MAX_VERSION = 12
EARLIEST, LATEST = -2, -1


READ_UNCOMMITTED, READ_COMMITTED = 0, 1

OFFSET_OUT_OF_RANGE = BY_NAME["OFFSET_OUT_OF_RANGE"].code
# errors after which a partition's leader must be looked up again
LEADER_ERRORS = frozenset(BY_NAME[name].code for name in (
    "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER", "REPLICA_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "INCONSISTENT_TOPIC_ID"))
# the `auto.offset.reset` values that reset a position; any other (none, error) fails the partition
RESET_POLICIES = ("earliest", "latest")


def isolation_level(config: Config) -> int:
    """Fetch's and ListOffsets' isolation_level for `isolation.level`."""
    return READ_COMMITTED if config["isolation.level"] == "read_committed" else READ_UNCOMMITTED


def fetch_version(conn: Any) -> int:
    return min(conn.version_for(messages.FETCH), FETCH_MAX_VERSION)


def fetch_body(config: Config, wanted: Iterable[tuple[Any, ...]], *, max_wait_ms: int | None = None,
               partition_max_bytes: int | None = None, max_bytes: int | None = None) -> dict[str, Any]:
    """A full (sessionless) Fetch for (topic, partition, offset) triples, or (topic, partition,
    offset, partition_max_bytes) as `fetcher.PartitionFetch.request` gives them."""
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    default_pmax = partition_max_bytes or config["max.partition.fetch.bytes"]
    for topic, partition, offset, *size in wanted:
        pmax = size[0] if size else default_pmax
        topics[topic].append({"partition": partition, "fetch_offset": offset, "partition_max_bytes": pmax,
                              "current_leader_epoch": -1, "log_start_offset": -1})
    return {
        "replica_id": -1,
        "max_wait_ms": config["fetch.max.wait.ms"] if max_wait_ms is None else max_wait_ms,
        "min_bytes": config["fetch.min.bytes"],
        "max_bytes": config["fetch.max.bytes"] if max_bytes is None else max_bytes,
        "isolation_level": isolation_level(config),
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


# A look-up's Fetch waits this long for data at first (tansu answers max_wait_ms=0 with nothing),
# doubling after each answer without a batch, up to LOOKUP_WAIT_MAX_MS
LOOKUP_WAIT_MS, LOOKUP_WAIT_MAX_MS = 10, 500


class LogScan:
    """A forward read of one partition's log, for the producer's look-ups (`find_batch_offset`,
    `records_of_producer`): the one owner of their bounds and of what a broker's answer means.

    `piece(conn)` fetches the log at `offset` (every batch, committed or not), the caller scans
    the whole batches it holds and moves `offset` past them, and `scanned` says what the piece
    held. Bounds: the whole scan takes at most `request.timeout.ms` (`LookupTimeoutError`) and
    reads at most `max_bytes`. A log that starts later than `offset` (OFFSET_OUT_OF_RANGE) is read
    from its start; a piece with no whole batch (the next batch is larger than a fetch) makes the
    next fetch four times larger, up to `max_bytes` or `fetch.max.bytes`; an answer with no batch
    below the high watermark (tansu just after a restart) makes the broker wait longer for data
    next time. An answer that does not name the partition raises `DecodeError`, any other error
    `BrokerError`."""

    def __init__(self, config: Config, topic: str, partition: int, start: int, max_bytes: int | None = None):
        self.config = config
        self.topic, self.partition = topic, partition
        self.offset = max(start, 0)
        self.max_bytes = max_bytes
        self.fetch_bytes = min(config["max.partition.fetch.bytes"], max_bytes or config["fetch.max.bytes"])
        self.read = 0
        self.high_watermark: int | None = None
        self.empty = 0  # answers in a row with no batch below the high watermark
        self.wait_ms = LOOKUP_WAIT_MS
        self.deadline = asyncio.get_running_loop().time() + config["request.timeout.ms"] / 1000

    @property
    def done(self) -> bool:
        """The high watermark reached, or `max_bytes` read."""
        return ((self.high_watermark is not None and self.offset >= self.high_watermark)
                or (self.max_bytes is not None and self.read >= self.max_bytes))

    async def piece(self, conn: Any) -> bytes:
        """The log's bytes from `offset` on, as one Fetch answers them (possibly none)."""
        while True:
            if asyncio.get_running_loop().time() > self.deadline:
                raise LookupTimeoutError(
                    f"reading {self.topic}/{self.partition} from offset {self.offset}: not done within "
                    f"request.timeout.ms={self.config['request.timeout.ms']} ({self.empty} answer(s) in a row "
                    "below the high watermark with no batch)")
            body = fetch_body(self.config, [(self.topic, self.partition, self.offset)], max_wait_ms=self.wait_ms,
                              partition_max_bytes=self.fetch_bytes, max_bytes=self.fetch_bytes)
            body["isolation_level"] = READ_UNCOMMITTED  # every batch written, committed or not
            response = await conn.request(messages.FETCH, body, fetch_version(conn))
            part = next((p for t in response.responses for p in t.partitions
                         if t.topic == self.topic and p.partition_index == self.partition), None)
            if part is None:
                raise DecodeError(f"Fetch {self.topic}/{self.partition}: the answer does not name the partition "
                                  "asked for")
            if part.error_code == OFFSET_OUT_OF_RANGE and part.get("log_start_offset", -1) > self.offset:
                self.offset = part.log_start_offset  # the log no longer starts there
                continue
            if part.error_code:
                raise BrokerError(part.error_code, f"Fetch {self.topic}/{self.partition} at {self.offset}")
            self.high_watermark = part.high_watermark
            return bytes(part.records or b"")

    def scanned(self, nbytes: int, whole_batches: int) -> None:
        """The caller read a piece of `nbytes` holding `whole_batches` (and moved `offset` past them)."""
        self.read += max(nbytes, 1)
        if nbytes == 0:  # nothing yet below the high watermark: give the broker longer to read its log
            self.empty += 1
            self.wait_ms = min(self.wait_ms * 2, LOOKUP_WAIT_MAX_MS)
            return
        self.empty, self.wait_ms = 0, LOOKUP_WAIT_MS
        if whole_batches == 0:  # the next batch is larger than a fetch: ask for more at once
            self.fetch_bytes = min(self.fetch_bytes * 4, self.max_bytes or self.config["fetch.max.bytes"])


async def find_batch_offset(conn: Any, config: Config, topic: str, partition: int, start: int, *,
                            producer_id: int, producer_epoch: int, base_sequence: int,
                            max_bytes: int) -> int | None:
    """The base offset of the batch of (`producer_id`, `producer_epoch`, `base_sequence`) in
    `topic`/`partition`, read forward from offset `start` (a lower bound the caller knows) on
    `conn`, a connection to the partition's leader; None when it is not there: the high
    watermark, a later batch of the same producer, or `max_bytes` read came first.

    Reads batch headers only (no CRC, no decompression). Each request has the connection's
    `request.timeout.ms`; a failed request raises (BrokerError, BrokerConnectionError, ...); the
    whole look-up is bounded as `LogScan` says."""
    scan = LogScan(config, topic, partition, start, max_bytes)
    while not scan.done:
        buf = await scan.piece(conn)
        pos, end, whole = 0, len(buf), 0
        while (head := read_batch_header(buf, pos, end, False)) is not None:
            base, length, last_delta, pid, epoch, sequence = head[0], head[1], head[6], head[9], head[10], head[11]
            if pid == producer_id and epoch == producer_epoch:
                if sequence == base_sequence:
                    return base
                if sequence > base_sequence:  # a later batch of this producer: ours lies before `start`
                    return None
            pos += LENGTH_OFFSET + length
            whole += 1
            scan.offset = max(scan.offset, base + last_delta + 1)
        scan.scanned(end, whole)
    return None


async def list_offsets(cluster: Any, topic: str, partitions: Iterable[int], timestamp: int) -> dict[int, int]:
    """ListOffsets per leader: -2 earliest, -1 latest, else the first offset at or after `timestamp` ms.

    A timestamp after the last record answers -1; the caller decides what that means.
    """
    await cluster.topic(topic)
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in partitions:
        by_leader[cluster.metadata.leader(topic, p)].append(p)
    out: dict[int, int] = {}

    async def ask(leader: int, ps: list[int]) -> None:
        conn = await cluster.connection(leader) if leader >= 0 else await cluster.leader_connection(topic, ps[0])
        body = {"replica_id": -1, "isolation_level": isolation_level(cluster.config),
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1} for p in ps]}]}
        response = await conn.request(messages.LIST_OFFSETS, body)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise BrokerError(p.error_code, f"ListOffsets {topic}/{p.partition_index}")
                offset = p.offset
                if conn.version_for(messages.LIST_OFFSETS) == 0:
                    offset = p.old_style_offsets[0] if p.old_style_offsets else -1
                out[p.partition_index] = offset

    await asyncio.gather(*(ask(leader, ps) for leader, ps in by_leader.items()))
    return out


async def high_watermarks(cluster: Any, topic: str, partitions: Iterable[int] | None = None,
                          earliest: dict[int, int] | None = None) -> dict[int, int]:
    """Where each partition ends (the offset the next record will get; under read_committed,
    the last stable offset), from a Fetch response.

    `earliest`: each partition's first offset, if the caller has just looked it up."""
    if earliest is None:
        return (await log_bounds(cluster, topic, partitions))[1]
    info = await cluster.topic(topic, refresh=True)
    ps = sorted(info.partitions) if partitions is None else list(partitions)
    found = await _probe(cluster, topic, {p: max(earliest.get(p, 0), 0) for p in ps})
    return {p: hw for p, (_, hw) in found.items()}


async def log_bounds(cluster: Any, topic: str, partitions: Iterable[int] | None = None
                     ) -> tuple[dict[int, int], dict[int, int]]:
    """Each partition's first offset and high watermark, by a 1-byte Fetch at offset 0: a
    partition that answers it starts at 0 (or at the log start offset it reports). Only a
    partition whose log no longer starts at 0 (OFFSET_OUT_OF_RANGE) costs a ListOffsets, which
    on tansu takes 75 ms for a partition of 16,667 batches against 14 ms for the Fetch."""
    info = await cluster.topic(topic, refresh=True)
    ps = sorted(info.partitions) if partitions is None else list(partitions)
    found = await _probe(cluster, topic, dict.fromkeys(ps, 0))
    earliest = {p: max(0, start) for p, (start, hw) in found.items() if hw >= 0}
    moved = [p for p in ps if p not in earliest]
    if moved:
        earliest.update(await list_offsets(cluster, topic, moved, EARLIEST))
        found.update(await _probe(cluster, topic, {p: earliest[p] for p in moved}))
    return earliest, {p: found[p][1] for p in ps}


async def _probe(cluster: Any, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
    """A 1-byte Fetch per leader at these offsets: each partition's (log start offset, end),
    (-1, -1) where the offset is out of range; the end is the high watermark, or under
    read_committed the last stable offset."""
    committed = isolation_level(cluster.config) == READ_COMMITTED
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in offsets:
        by_leader[cluster.metadata.leader(topic, p)].append(p)
    out: dict[int, tuple[int, int]] = {}

    async def probe(leader: int, lps: list[int]) -> None:
        conn = await cluster.connection(leader)
        body = fetch_body(cluster.config, [(topic, p, offsets[p]) for p in lps],
                          max_wait_ms=10, partition_max_bytes=1, max_bytes=1)  # tansu answers max_wait_ms=0 with nothing
        response = await conn.request(messages.FETCH, body, fetch_version(conn))
        for t in response.responses:
            for p in t.partitions:
                if p.error_code == OFFSET_OUT_OF_RANGE:
                    out[p.partition_index] = (-1, -1)
                elif p.error_code:
                    raise BrokerError(p.error_code, f"Fetch {topic}/{p.partition_index}")
                else:
                    stable = p.get("last_stable_offset", -1)
                    end = stable if committed and stable >= 0 else p.high_watermark
                    out[p.partition_index] = (p.get("log_start_offset", -1), end)

    await asyncio.gather(*(probe(leader, lps) for leader, lps in by_leader.items()))
    return out


async def _first_at_or_after(cluster: Any, topic: str, partition: int, offset: int, stamp: int) -> int:
    """Read forward from `offset` to the first record stamped at or after `stamp`.

    Some brokers (tansu 0.6) answer ListOffsets(timestamp) with the base offset of the batch
    holding that time, not the record's own offset.
    """
    from .arrow_batches import records_to_arrow

    for _ in range(100):
        conn = await cluster.leader_connection(topic, partition)
        response = await conn.request(messages.FETCH, fetch_body(cluster.config, [(topic, partition, offset)],
                                                                 max_wait_ms=10), fetch_version(conn))
        part = response.responses[0].partitions[0] if response.responses else None
        if part is None or part.error_code or not part.records:
            return offset
        batch, after = records_to_arrow(part.records, topic, partition, offset, check_crc=False,
                                        max_decompressed=cluster.config["max.decompressed.batch.bytes"])
        stamps = batch.column("timestamp").cast("int64").to_numpy()
        hits = (stamps >= stamp).nonzero()[0]
        if len(hits):
            return int(batch.column("offset")[int(hits[0])].as_py())
        if after <= offset:
            return offset
        offset = after
    return offset


async def resolve_offsets(cluster: Any, topic: str, partitions: Iterable[int], start: Any) -> dict[int, int]:
    """Starting offsets for `start`: earliest/oldest/beginning, latest/newest/end, an offset
    (int, or a negative one counting back from the end), or {"timestamp": ms}."""
    ps = list(partitions)
    if isinstance(start, dict):
        if set(start) != {"timestamp"}:
            raise ValueError(f"start: a dict start must be {{'timestamp': ms}}, got {start!r}")
        stamp = int(start["timestamp"])
        found = await list_offsets(cluster, topic, ps, stamp)
        missing = [p for p, o in found.items() if o < 0]
        if missing:  # no record at or after the timestamp: start at the end
            found.update(await high_watermarks(cluster, topic, missing))
        for p in ps:
            if p not in missing:
                found[p] = await _first_at_or_after(cluster, topic, p, found[p], stamp)
        return found
    if isinstance(start, str):
        name = start.lower()
        if name in ("earliest", "oldest", "beginning", "smallest"):
            return (await log_bounds(cluster, topic, ps))[0]
        if name in ("latest", "newest", "end", "largest"):
            return await high_watermarks(cluster, topic, ps)
        raise ValueError(f"start: expected earliest, latest, an offset or {{'timestamp': ms}}; got {start!r}")
    if isinstance(start, bool) or not isinstance(start, int):
        raise ValueError(f"start: expected earliest, latest, an offset or {{'timestamp': ms}}; got {start!r}")
    if start >= 0:
        return dict.fromkeys(ps, start)
    begins, ends = await log_bounds(cluster, topic, ps)
    return {p: max(begins[p], ends[p] + start) for p in ps}


class WrittenRecord(NamedTuple):
    """A record of one producer found in the log (`records_of_producer`): where it lies, who
    wrote it under which sequence number, and what it holds."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    producer_epoch: int = -1
    sequence: int = -1  # its batch's base sequence + its place in the batch
    headers: tuple = ()  # ((key, value), ...)


async def records_of_producer(cluster: Any, topic: str, partition: int, start: int,
                              producer_ids: int | Collection[int | tuple[int, int]],
                              max_decompressed: int) -> list[WrittenRecord]:
    """Every record `producer_ids` wrote to `topic`/`partition` from offset `start` (or the
    log's start, if that is later) up to the high watermark, in offset order. `producer_ids`:
    one producer id, or several, each an id (any epoch) or an (id, epoch) pair.

    A producer that heals its pipeline asks this for the messages a dead Flusher had in flight:
    what of them the log holds. Each request is bounded by `request.timeout.ms`, and the whole
    scan as `LogScan` says."""
    wanted = {producer_ids} if isinstance(producer_ids, int) else set(producer_ids)
    scan = LogScan(cluster.config, topic, partition, start)
    found: list[WrittenRecord] = []
    while True:
        buf = await scan.piece(await cluster.leader_connection(topic, partition))
        if scan.done:
            return found
        batches = decode_record_batches(buf, max_decompressed=max_decompressed)
        for batch in batches:
            ours = batch.producer_id in wanted or (batch.producer_id, batch.producer_epoch) in wanted
            if ours and not batch.is_control:
                first = batch.base_sequence - batch.base_offset  # a record's sequence is first + its offset
                found.extend(WrittenRecord(r.offset, r.timestamp, r.key, r.value, batch.producer_id,
                                           batch.producer_epoch, (first + r.offset) & SEQUENCE_MASK, tuple(r.headers))
                             for r in batch.records if r.offset >= scan.offset)
            scan.offset = max(scan.offset, batch.next_offset)
        scan.scanned(len(buf), len(batches))
