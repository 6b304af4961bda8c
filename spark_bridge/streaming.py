"""Streaming reads: an unbounded run of micro-batches, each a bounded range read into Ray or Spark.

    stream_kafka(["events"], {"bootstrap.servers": ..., "group.id": "etl"}, step,
                 max_offsets_per_trigger=100_000)          # step(dataset, batch) per micro-batch
    foreach_batch_kafka(spark, ["events"], config, fn)    # fn(dataframe, batch_id), as Spark's foreachBatch

One `KafkaStream` per running stream, on the driver; it never carries rows. Each trigger, in order:
  1. topics: the names given, or every topic whose whole name matches `subscribe_pattern` now;
  2. bounds: each partition's log start and high watermark (`Admin`);
  3. plan (`plan_batch`, Ray-free): from the position to the high watermark (or the stream's
     `ending_offsets`), capped at `max_offsets_per_trigger` records over all partitions, shared
     in proportion to each partition's backlog as Spark's `maxOffsetsPerTrigger` shares them;
  4. read: a Ray Dataset (`reader.read_dataset`: Ray Data read tasks, a block per partition
     range) or a Spark DataFrame (`reader.read_kafka`) of exactly those ranges;
  5. step(data, batch): the user's code;
  6. commit, only once the step returned: the batch's ends become the position and, with
     `group.id`, the group's committed offsets (OffsetCommit through `Admin.alter_offsets`).

With `producer=` (a `Producer` with `transactional.id`, which the stream initializes) steps 5
and 6 are one Kafka transaction: the stream begins it, the step writes its output through that
producer (`producer.send_batch`, or `write_kafka` / `write_dataset` with `producer=`), and the
stream sends the batch's ends to the transaction as the group's offsets and commits it. A
read_committed reader of the output and the group's committed position then move together:
a run stopped anywhere (a crash, a failed step, a killed actor) leaves the output of each
input record once. An actor of the producer's pipeline dying mid-trigger aborts the trigger's
transaction; the abort replaces the pipeline and the stream runs the same trigger again (at most
`TRIGGER_ATTEMPTS` times). Every other failure aborts the transaction and ends the stream,
raised. The output's rows go through that one producer, from the driver.

The position starts at the group's committed offsets where it has them, else at
`starting_offsets`; partitions found later (a new topic matching the pattern) start at their
earliest offset, as in Spark. A step that raises ends the stream with that error and nothing of
its batch committed: the stream started again hands the same records again, from the same
offsets. So delivery into the step is at-least-once, and every offset reaches a step that
returned, none skipped (unless `fail_on_data_loss=False` lets the log's deletion skip some,
with a warning).

The group is used only for its committed offsets: the stream joins no group, so it reads every
partition itself, and a group with live members (a `ConsumerGroup` under the same id) is
refused when the stream commits (`GroupNotEmptyError`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..driver.admin import Admin
from ..wire.admin import TopicPartition
from ..wire.config import common_part, parse_config
from ..wire.errors import ConfigError, TransactionFatalError
from ..wire.serde import require_raw
from .offsets import PartitionRange, check_range, offsets_json, parse_offsets, pick_offset, subscribed_topics
from .reader import read_dataset, read_kafka
from .to_spark import release

STREAM_ONLY_KEYS = ("group.id",)  # read by the stream (its offsets), not by each batch's read

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.1
"""The least a trigger that found nothing new waits before the next asks the broker again."""

TRIGGER_ATTEMPTS = 3
"""Times a transactional trigger is run when its transaction aborts for a cause the abort cured
(an actor of the producer's pipeline died, and the abort replaced the pipeline)."""


@dataclass(frozen=True)
class Bounds:
    """One partition's log: its first offset and its high watermark."""

    log_start: int
    end: int


@dataclass(frozen=True)
class MicroBatch:
    """One trigger's ranges. `batch_id` is the sum of the ranges' start offsets: a batch handed
    again after a restart has the same id, and each later batch a larger one (so a sink may
    deduplicate by it, as Spark's foreachBatch promises)."""

    batch_id: int
    ranges: tuple[PartitionRange, ...]

    @property
    def count(self) -> int:
        return sum(r.count for r in self.ranges)

    @property
    def ends(self) -> dict[TopicPartition, int]:
        return {TopicPartition(r.topic, r.partition): r.end for r in self.ranges}


def cap_ranges(ranges: Iterable[PartitionRange], limit: int | None) -> list[PartitionRange]:
    """At most `limit` records over all `ranges`, each range getting its share of the limit in
    proportion to its size, at least one record where it has any (Spark's rate limit for
    `maxOffsetsPerTrigger`); every range unchanged when they fit."""
    ranges = list(ranges)
    total = sum(r.count for r in ranges)
    if limit is None or total <= limit:
        return ranges
    out = []
    for r in ranges:
        share = limit * r.count / total
        take = int(share) if share >= 1 else (1 if r.count else 0)
        out.append(PartitionRange(r.topic, r.partition, r.start, min(r.end, r.start + take)))
    return out


def plan_batch(position: Mapping[TopicPartition, int], bounds: Mapping[TopicPartition, Bounds],
               ending: Mapping[TopicPartition, int] | None, limit: int | None,
               fail_on_data_loss: bool) -> MicroBatch:
    """The next micro-batch from `position`: each partition up to its high watermark (or its end
    in `ending`), capped at `limit` records in all. A position outside the partition's log is
    data loss (`check_range`: raised, or moved into the log with a warning)."""
    wanted = []
    for tp in sorted(tp for tp in position if tp in bounds):  # a topic deleted meanwhile has none
        b = bounds[tp]
        end = b.end if ending is None else min(b.end, ending.get(tp, b.end))
        checked = check_range(tp.topic, tp.partition, position[tp], max(position[tp], end), b.log_start, b.end,
                              fail_on_data_loss)
        wanted.append(checked)
    ranges = cap_ranges(wanted, limit)
    return MicroBatch(sum(r.start for r in ranges), tuple(ranges))


class KafkaStream:
    """A stream of micro-batches over topics; `run(step)` hands them to `step` until the stream
    ends (its `ending_offsets` reached, `stop()` called, or the step raised). One run per stream.

    topics / subscribe_pattern: exactly one; a pattern is looked up at every trigger.
    starting_offsets: where a partition without a committed offset starts ("earliest", "latest"
      or per-partition JSON). ending_offsets: None (unbounded), "latest" (the ends when the stream
      starts: Spark's Trigger.AvailableNow) or per-partition JSON.
    max_offsets_per_trigger: records a micro-batch holds at most. trigger_interval: seconds from
      one trigger's start to the next. fail_on_data_loss: see `offsets.check_range`.
    read(topics, config, starting_json, ending_json): what turns ranges into the step's data
      (default: a Ray Dataset by `reader.read_dataset`).
    producer: a transactional `Producer` (not yet initialized) that the step writes its output
      through; each trigger is then one transaction, the group's offsets in it (needs `group.id`).
      `run` initializes it (init_transactions) and leaves it open."""

    def __init__(self, topics: Iterable[str] | str | None, config: Mapping[str, Any], *,
                 subscribe_pattern: str | None = None, starting_offsets: Any = "earliest",
                 ending_offsets: Any = None, max_offsets_per_trigger: int | None = None,
                 trigger_interval: float = 0.0, fail_on_data_loss: bool = True,
                 read: Callable[[list[str], Mapping[str, Any], str, str], Any] | None = None,
                 producer: Any = None):
        subscribed_topics(topics, subscribe_pattern, ())  # exactly one of them, a valid pattern
        if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
            raise ConfigError(f"max_offsets_per_trigger must be at least 1, got {max_offsets_per_trigger}")
        if trigger_interval < 0:
            raise ConfigError(f"trigger_interval must not be negative, got {trigger_interval}")
        self.config = dict(config)
        parsed = parse_config(self.config, role="stream")  # a bad key fails here; an unread one warns
        # what each batch's read is given: the stream's own key (group.id) is not the read's
        self.read_config = {k: v for k, v in self.config.items() if k not in STREAM_ONLY_KEYS}
        require_raw(self.config, "a Kafka stream", "deserialize the columns in the step")
        self.group_id: str | None = parsed.get("group.id") or None
        self.topics = None if topics is None else [topics] if isinstance(topics, str) else list(topics)
        self.pattern = subscribe_pattern
        self.starting_offsets = parse_offsets(starting_offsets, "startingOffsets")
        self.ending_spec = None if ending_offsets is None else parse_offsets(ending_offsets, "endingOffsets")
        if self.ending_spec == "earliest":
            raise ConfigError("endingOffsets: earliest is not allowed (as in Spark)")
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.trigger_interval = trigger_interval
        self.fail_on_data_loss = fail_on_data_loss
        self.read = read or _read_dataset
        if producer is not None:
            if getattr(producer, "config", {}).get("transactional.id") is None:
                raise ConfigError("producer: the stream commits each trigger in a transaction of this producer; "
                                  "give one with transactional.id")
            if self.group_id is None:
                raise ConfigError("producer: the stream sends each trigger's offsets to its transaction as a "
                                  "consumer group's; give group.id")
        self.producer = producer
        self.position: dict[TopicPartition, int] = {}
        self.batches = 0  # micro-batches handed to a step that returned, in this run
        self._ending: dict[TopicPartition, int] | None = None
        self._stopped = threading.Event()
        self._admin = Admin(common_part(self.config))  # the keys it reads: it warns of none

    # -- the loop ----------------------------------------------------------

    def run(self, step: Callable[[Any, MicroBatch], Any]) -> int:
        """Hand each micro-batch to `step(data, batch)` and commit its ends once `step` returned.
        Returns the number of micro-batches handled; a step's error ends the stream, raised as is."""
        try:
            if self.producer is not None:  # fences an earlier run's producer, aborts what it left open
                self.producer.init_transactions()
            while not self._stopped.is_set():
                began = time.monotonic()
                batch = self.next_batch()
                wait = self.trigger_interval
                if batch.count and self.producer is None:
                    step(self._data(batch), batch)
                    self.commit(batch)
                elif batch.count:
                    self._transaction(step, batch)
                elif self._ending is not None:
                    log.info("stream/%s reached its ending offsets after %d batches", self._name, self.batches)
                    break
                else:
                    wait = max(wait, IDLE_WAIT_S)
                self._stopped.wait(max(0.0, wait - (time.monotonic() - began)))
            return self.batches
        finally:
            self.close()

    def stop(self) -> None:
        """End the stream after the micro-batch in hand (from another thread)."""
        self._stopped.set()

    def next_batch(self) -> MicroBatch:
        """The next micro-batch's ranges, from the position (read first, for partitions new to it)."""
        bounds = self._bounds(self._subscribed())
        self._learn_position(bounds)
        if self.ending_spec is not None and self._ending is None:
            self._ending = self._ending_offsets(bounds)
        batch = plan_batch(self.position, bounds, self._ending, self.max_offsets_per_trigger, self.fail_on_data_loss)
        # what data loss skipped stays skipped: the position moves into the log (committed with the batch)
        self.position.update({TopicPartition(r.topic, r.partition): r.start for r in batch.ranges})
        return batch

    def commit(self, batch: MicroBatch) -> None:
        """The batch's ends become the position, and the group's committed offsets."""
        moved = {tp: end for tp, end in batch.ends.items() if end != self.position.get(tp)}
        if self.group_id is not None and moved:
            self._admin.alter_offsets(self.group_id, moved)
        self._handled(batch)

    def _transaction(self, step: Callable[[Any, MicroBatch], Any], batch: MicroBatch) -> None:
        """The trigger as one transaction of `self.producer`: begin, the step's writes, the
        batch's ends as the group's offsets, commit. Run again when the abort cured the cause."""
        producer = self.producer
        for attempt in range(1, TRIGGER_ATTEMPTS + 1):
            heals = producer.healed
            producer.begin_transaction()
            try:
                step(self._data(batch), batch)
                producer.send_offsets_to_transaction(batch.ends, self.group_id)
                producer.commit_transaction()
            except TransactionFatalError:  # fenced: this producer can neither commit nor abort
                raise
            except BaseException as exc:
                self._abort(exc)
                cured = producer.healed > heals
                if not cured or attempt == TRIGGER_ATTEMPTS or not isinstance(exc, Exception):
                    raise
                log.warning("stream/%s: batch %d aborted (%s); the pipeline was replaced, running it again",
                            self._name, batch.batch_id, exc)
                continue
            self._handled(batch)
            return

    def _abort(self, cause: BaseException) -> None:
        """Abort the open transaction after `cause`; a failed abort is logged, `cause` stays the error."""
        try:
            self.producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - the caller raises `cause`, which this followed
            log.warning("stream/%s: aborting after %r failed too: %s", self._name, cause, exc)

    def _handled(self, batch: MicroBatch) -> None:
        self.position.update(batch.ends)
        self.batches += 1
        log.debug("stream/%s committed batch %d (%d records)", self._name, batch.batch_id, batch.count)

    def _data(self, batch: MicroBatch) -> Any:
        """The batch's records, as the stream's `read` gives them (a Dataset, a DataFrame)."""
        return self.read(sorted({r.topic for r in batch.ranges if r.count}), self.read_config, *_range_specs(batch.ranges))

    def close(self) -> None:
        self._admin.close()

    # -- where the stream stands -------------------------------------------

    @property
    def _name(self) -> str:
        return self.group_id or ",".join(self.topics or []) or str(self.pattern)

    def _subscribed(self) -> list[str]:
        existing = self._admin.list_topics() if self.pattern is not None else ()
        return subscribed_topics(self.topics, self.pattern, existing)

    def _bounds(self, topics: list[str]) -> dict[TopicPartition, Bounds]:
        out = {}
        for topic in topics:
            starts = self._admin.list_offsets(topic, "earliest")
            ends = self._admin.list_offsets(topic, "latest", list(starts))
            out.update({TopicPartition(topic, p): Bounds(starts[p], ends[p]) for p in starts})
        return out

    def _learn_position(self, bounds: Mapping[TopicPartition, Bounds]) -> None:
        """A position for every partition new to the stream: the group's committed offset, else
        `starting_offsets` on the first trigger, else (a partition found later) its log start."""
        new = [tp for tp in bounds if tp not in self.position]
        if not new:
            return
        committed: dict[TopicPartition, int] = {}
        if self.group_id is not None:
            wanted: dict[str, list[int]] = {}
            for tp in new:
                wanted.setdefault(tp.topic, []).append(tp.partition)
            committed = self._admin.committed_offsets(self.group_id, wanted)
        first = not self.position
        for tp in new:
            if tp in committed:
                self.position[tp] = committed[tp]
            elif first:
                b = bounds[tp]
                self.position[tp] = pick_offset(self.starting_offsets, tp.topic, tp.partition, b.log_start, b.end,
                                                b.log_start)
            else:
                self.position[tp] = bounds[tp].log_start

    def _ending_offsets(self, bounds: Mapping[TopicPartition, Bounds]) -> dict[TopicPartition, int]:
        """Where a bounded stream ends: the high watermarks when it starts ("latest", Spark's
        Trigger.AvailableNow), or per-partition offsets."""
        return {tp: pick_offset(self.ending_spec, tp.topic, tp.partition, b.log_start, b.end, b.end)
                for tp, b in bounds.items()}


def _range_specs(ranges: Iterable[PartitionRange]) -> tuple[str, str]:
    """Spark's per-partition JSON for the starts and for the ends of `ranges` (the topics with
    records only: each of them with all its partitions, as Spark's JSON must list them)."""
    ranges = list(ranges)
    topics = {r.topic for r in ranges if r.count}
    kept = [r for r in ranges if r.topic in topics]
    return (offsets_json({(r.topic, r.partition): r.start for r in kept}),
            offsets_json({(r.topic, r.partition): r.end for r in kept}))


def _read_dataset(topics: list[str], config: Mapping[str, Any], start: str, end: str) -> Any:
    return read_dataset(topics, config, start, end)


# -- entry points --------------------------------------------------------------


def stream_kafka(topics: Iterable[str] | str | None, config: Mapping[str, Any],
                 step: Callable[[Any, MicroBatch], Any], **options: Any) -> int:
    """Run a stream into Ray: `step(dataset, batch)` gets each micro-batch as a Ray Dataset
    with Spark's Kafka source schema and must consume it before returning; the batch's offsets
    are committed when it returns. Options: see `KafkaStream`. Returns the batches handled."""
    return KafkaStream(topics, config, **options).run(step)


def foreach_batch_kafka(spark: Any, topics: Iterable[str] | str | None, config: Mapping[str, Any],
                        fn: Callable[[Any, int], Any], **options: Any) -> int:
    """Spark's `foreachBatch` over a Kafka stream: `fn(dataframe, batch_id)` per micro-batch,
    the DataFrame read by `read_kafka` from the committed position to the latest offset (at
    most `max_offsets_per_trigger` records), the offsets committed when `fn` returns. As in
    Spark's `foreachBatch`, the DataFrame is the batch's only while `fn` runs: its rows are let
    go of when `fn` returns (persist what must outlive it, or write it out).
    Options: see `KafkaStream` (`trigger_interval` in seconds). Returns the batches handled."""
    def read(names: list[str], cfg: Mapping[str, Any], start: str, end: str) -> Any:
        return read_kafka(spark, names, start, end, cfg)

    def step(df: Any, batch: MicroBatch) -> Any:
        try:
            return fn(df, batch.batch_id)
        finally:  # the batch's rows are done with: not held in Ray until Spark stops
            release(spark, df)

    return KafkaStream(topics, config, read=read, **options).run(step)
