"""The per-partition state: what each partition's part of a Fetch answer means, with no I/O.

Cardinality: one `PartitionFetch` per partition a consumer reads. Who calls: the fetch engine
(`wire.fetch_round`), which every fetch loop calls and then acts on the outcomes:
`actors.broker_consumer` (`Consumer`), `actors.group_member_state` (`ConsumerGroup`) and
`wire.range_reader` (Ray Data read tasks, `raykafka consume -e`). Whom it calls: nothing; no I/O, no Ray. A fix to how a partition's answer is
read (a leader move, an offset out of range, a batch larger than the request, a corrupt batch)
is made here, once, for all three.

Per partition, in order: `request()` gives the (topic, partition, offset, bytes) entry of the
next Fetch; `take(part)` reads the partition's answer and returns one outcome:

- `Data`: records to decode (`decode`) from `fetched_at` on; the fetch position has moved to
  `next_offset`, and everything before `position` is decided (handed out or dropped);
- `Refetch`: the first batch at the position was cut by the request's size limit (a broker
  that does not follow KIP-74); the request grows to hold it, up to `fetch.max.bytes`;
- `Retry`: the leader moved or a retriable error: look the leader up again, after
  `retry.backoff.ms`, and fetch from the same position;
- `Reset`: the position is out of range and `auto.offset.reset` says where to go;
- `Failed`: the partition cannot go on (a batch larger than `fetch.max.bytes`, an offset out
  of range with `auto.offset.reset` none, a non-retriable error); `error` names the cause.

Under `isolation.level=read_committed`, `take` is also where aborted records are dropped, once
for every consumer: the partition's `read_committed.CommittedReader` (by markers until the
broker lists aborted transactions, then by the list) keeps the batches that may be handed out,
and `Data.records` holds only their bytes, so control batches and aborted transactions never
reach a decoder. A batch whose transaction's marker has not been fetched yet is held here
(with every batch after it): the fetch position moves past it, `position` stays before it.
The partition's end (`high_watermark`) is then its last stable offset, where a read_committed
reader stops. Under read_uncommitted `records` is the response's own bytes and `position` is
`next_offset` (control batches are skipped by the decoder).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .arrow_batches import records_to_arrow
from .config import Config
from .errors import (
    BrokerError,
    ConsumerError,
    DecodeError,
    KafkaError,
    RecordTooLargeError,
    code_for,
)
from .fetch import LEADER_ERRORS, OFFSET_OUT_OF_RANGE, RESET_POLICIES
from .read_committed import CommittedReader, fetched_batches
from .record_batch import LENGTH_OFFSET
from .record_batch_reader import InflationBudget, cut_batch, next_offset, read_batch_header


class Data(NamedTuple):
    """Records to decode from `fetched_at` on; the fetch position is now `next_offset`, and
    every offset before `position` is decided (the consumer's position may move there)."""

    records: Any  # the response's bytes (a view), or the bytes of the batches read_committed keeps
    fetched_at: int
    next_offset: int
    high_watermark: int  # read_committed: the last stable offset
    position: int


class Refetch(NamedTuple):
    """The first batch did not fit: fetch again at once, asking for `max_bytes`."""

    max_bytes: int


class Retry(NamedTuple):
    """Look the leader up again and fetch from the same position."""

    error: BrokerError


class Reset(NamedTuple):
    """The position is out of range: move it as `policy` (earliest, latest) says."""

    policy: str
    offset: int


class Failed(NamedTuple):
    """The partition cannot go on; `error` names it and the cause."""

    error: KafkaError


FetchOutcome = Data | Refetch | Retry | Reset | Failed


class PartitionFetch:
    """One partition's position and request size, and what each answer means."""

    def __init__(self, config: Config, topic: str, partition: int, offset: int, max_bytes: int | None = None):
        self.topic = topic
        self.partition = partition
        self.offset = offset  # the next offset to fetch
        self.high_watermark = -1
        self.base_bytes = max_bytes or config["max.partition.fetch.bytes"]
        self.max_bytes = self.base_bytes  # grown while a batch larger than base_bytes is fetched
        self.limit = max(config["fetch.max.bytes"], self.base_bytes)
        self.reset_policy = config["auto.offset.reset"]
        self.read_committed = config["isolation.level"] == "read_committed"
        self.committed = CommittedReader(by_markers=None) if self.read_committed else None
        self.position = offset  # read_committed: every offset before it is decided

    def __repr__(self) -> str:
        return f"PartitionFetch({self.topic}/{self.partition} at {self.offset})"

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}"

    def request(self) -> tuple[str, int, int, int]:
        """This partition's entry in the next Fetch (see `fetch.fetch_body`)."""
        return self.topic, self.partition, self.offset, self.max_bytes

    def take(self, part: Any) -> FetchOutcome:
        """The partition's part of a Fetch response (`error_code`, `high_watermark`, `records`)."""
        code = part.error_code
        if code:
            return self._error(code)
        stable = getattr(part, "last_stable_offset", -1)
        self.high_watermark = stable if self.read_committed and stable >= 0 else part.high_watermark
        records = part.records
        fetched_at = self.offset
        after = next_offset(records, fetched_at)
        if records and after == fetched_at:  # no batch came whole: the one at our offset was cut
            cut = cut_batch(records)
            if cut is not None:
                return self._grow(cut[0] if cut[0] >= 0 else fetched_at, cut[1])
        self.offset = after
        self.max_bytes = self.base_bytes
        if self.committed is None:
            return Data(records, fetched_at, after, self.high_watermark, after)
        try:
            return self._committed(records, getattr(part, "aborted_transactions", None))
        except DecodeError as exc:  # a batch header or marker that cannot be read: this partition fails alone
            return Failed(type(exc)(f"{self.where}: {bad_data(fetched_at, exc)}"))

    def _committed(self, records: Any, aborted: Any) -> Data:
        """read_committed: the fetched batches that may be handed out now (`CommittedReader`)."""
        assert self.committed is not None
        batches = fetched_batches(records)
        kept = self.committed.feed(batches, aborted)
        if len(kept) != len(batches) or any(k is not b for k, b in zip(kept, batches, strict=True)):
            records = b"".join(b.data for b in kept)
        decided_from, held = self.position, self.committed.first_held
        self.position = self.offset if held is None else max(decided_from, held)
        return Data(records, decided_from, self.offset, self.high_watermark, self.position)

    def moved_to(self, offset: int) -> None:
        """The position was set elsewhere (a reset, a seek)."""
        self.offset = self.position = offset
        self.max_bytes = self.base_bytes
        if self.committed is not None:
            self.committed = CommittedReader(by_markers=None)

    def _error(self, code: int) -> FetchOutcome:
        error = BrokerError(code, f"Fetch {self.where} at offset {self.offset}")
        if code == OFFSET_OUT_OF_RANGE:
            if self.reset_policy in RESET_POLICIES:
                return Reset(self.reset_policy, self.offset)
            return Failed(ConsumerError(f"{self.where}: offset {self.offset} is out of range and "
                                        f"auto.offset.reset={self.reset_policy}"))
        if code in LEADER_ERRORS or code_for(code).retriable:
            return Retry(error)
        return Failed(error)

    def _grow(self, base_offset: int, size: int) -> FetchOutcome:
        """The batch at `base_offset` is `size` bytes (0: too little came to tell), more than this
        request gave it: ask for all of it (or twice as much), up to `fetch.max.bytes`."""
        wanted = size or min(self.max_bytes * 2, self.limit)
        if wanted > self.limit or (not size and self.max_bytes >= self.limit):
            what = f"is {size} bytes" if size else "does not fit"
            return Failed(RecordTooLargeError(
                f"{self.where}: the record batch at offset {base_offset} {what}, more than fetch.max.bytes "
                f"({self.limit}) lets a fetch ask for; raise fetch.max.bytes to read it"))
        if wanted <= self.max_bytes:  # cut by the response's overall limit, not this partition's
            return Refetch(self.max_bytes)
        self.max_bytes = wanted
        return Refetch(wanted)


def decode(records: Any, topic: str, partition: int, fetched_at: int, config: Config,
           answer: InflationBudget | None = None) -> tuple[Any, int]:
    """Fetched bytes as one Arrow batch of the records at or after `fetched_at`, and the offset
    after them (`arrow_batches.records_to_arrow`, with the consumer's `check.crcs` and
    `max.decompressed.batch.bytes`; `answer`: the budget of the whole answer, from
    `answer_budget`); bytes that cannot be read raise a `DecodeError`."""
    return records_to_arrow(records, topic, partition, fetched_at, check_crc=config["check.crcs"],
                            max_decompressed=config["max.decompressed.batch.bytes"], answer=answer)


def answer_budget(response: Any, config: Config) -> InflationBudget:
    """What every partition of one Fetch answer may inflate to together, for a loop that decodes
    them all in one process (`actors.group_member_state`); the other loops decode one partition's part
    per process, each within its own budget."""
    fetched = sum(len(part.records or b"") for t in response.responses for part in t.partitions)
    return InflationBudget(fetched, config["max.decompressed.batch.bytes"], "this fetch answer")


def decode_until_bad(records: Any, topic: str, partition: int, fetched_at: int, config: Config,
                     answer: InflationBudget | None = None) -> tuple[Any, int, DecodeError | None]:
    """`decode`, but a batch that cannot be read ends what is handed out instead of failing the
    whole fetch: the records of every batch before it, the offset after them (where the bad
    batch starts), and its `DecodeError` (None when every batch could be read). The first,
    whole decode draws on `answer`; reading the batches again to find the bad one does not
    (what they inflate to was counted already, and each stays within the per-batch cap)."""
    try:
        return (*decode(records, topic, partition, fetched_at, config, answer), None)
    except DecodeError as exc:
        bad = first_bad_batch(records, topic, partition, fetched_at, config)
        if bad is None:  # no one batch fails alone: the fetch fails as a whole
            raise
        batch, after = decode(memoryview(records).cast("B")[:bad], topic, partition, fetched_at, config)
        return batch, after, exc


def first_bad_batch(records: Any, topic: str, partition: int, fetched_at: int, config: Config) -> int | None:
    """Where in `records` the first whole batch that `decode` cannot read starts, or None."""
    view = memoryview(records).cast("B")
    pos, end = 0, len(view)
    while True:
        try:
            head = read_batch_header(view, pos, end, False)
            if head is None:
                return None
            batch_end = pos + LENGTH_OFFSET + head[1]
            decode(view[pos:batch_end], topic, partition, fetched_at, config)
        except DecodeError:
            return pos
        pos = batch_end


def bad_data(fetched_at: int, error: BaseException) -> str:
    """Why a partition stops at data it cannot read (`decode` or a deserializer raised `error`)."""
    return f"bad data fetched at offset {fetched_at}: {type(error).__name__}: {error}"
