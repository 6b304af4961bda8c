"""How messages ended, on their way to the driver: `Outcome`, `Reports` and the `Mailbox` an
actor that decides outcomes keeps them in until the driver polls it (Sarama's Successes and
Errors channels). No Ray here.

Cardinality: one `Mailbox` per BrokerWorker (its Flushers' successes and final errors, and the
notes of the numbered batches it received) and one in the RetryHandler (what the stages before
the brokers could not hand on: an unknown topic, a bad partition, no leader, a failed call).
There is no results-only actor: the driver long-polls each of them (`poll`), so an outcome
reaches it in one hop from the actor that decided it. The entries of one mailbox come out in
the order they went in; the driver needs no order across mailboxes, since every entry names
the message ids it settles.

An entry is an `Outcome` (ids, topic, partition, first offset or -1, log-append time or -1,
error or None); the i-th id's offset is first offset + i. A numbered batch's sequence numbers
come as a `SequenceSpan`; a BrokerWorker notes each numbered batch as it receives it, before
its bytes can reach a broker (`noted`), and the driver keeps the notes (`Reports.numbered`)
until their messages end, for a heal to tell exactly whose a record in the log is.

With idempotence each mailbox also knows, per partition and numbering, which sequence numbers
ended there (`idempotence.EndedSequences`); the RetryHandler merges its own with every live
worker's (`ended_intervals`) to answer a LeaderDispatcher's `first_unresolved` on a RESET.

`report_failed` is how a stage fails batches it cannot hand on (a call downstream failed):
one entry per batch with messages, and the sequence spans of those that were numbered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from .idempotence import EndedSequences, NumberedBatch, SequenceSpan, numbered_batch, sequence_span

__all__ = ["Mailbox", "NumberedBatch", "Outcome", "Reports", "SequenceSpan", "report_failed", "sequence_span"]


class Outcome(NamedTuple):
    """How some messages of one topic ended: delivered at `first_offset` (the i-th id at
    `first_offset + i`; -1 when acks=0 gives none), or failed with `error`."""

    ids: Any  # message ids: a list, range or numpy array
    topic: str
    partition: int
    first_offset: int = -1
    append_ms: int = -1  # the broker's log-append time, -1 for create time
    error: Exception | None = None

    @classmethod
    def failed(cls, ids: Any, error: Exception, topic: str = "", partition: int = -1) -> Outcome:
        return cls(ids, topic, partition, -1, -1, error)


class Reports(NamedTuple):
    """What one `poll` of a mailbox hands the driver: how messages ended, the numbered batches
    noted since the last poll (what a heal needs to tell exactly whose a record is), whether the
    mailbox is closed (its actor exits: nothing more comes from it), and, from the
    RetryHandler, the broker workers to poll (`WorkerList`, when it changed)."""

    outcomes: list[Outcome]
    numbered: list[NumberedBatch]
    closed: bool = False
    workers: WorkerList | None = None


class WorkerList(NamedTuple):
    """The broker workers a producer runs, each as (name, handle), and the list's version."""

    version: int
    workers: list[tuple[str, Any]]


class Mailbox:
    """The outcomes and notes an actor decided, until the driver takes them; thread-safe.

    `wake` is called (under the mailbox's lock) whenever there is news: an async actor sets its
    asyncio event there. `poll` waits in a thread, for a threaded caller."""

    def __init__(self, wake: Callable[[], None] | None = None, notes: bool = True):
        """`notes`: keep the notes of numbered batches (a producer that heals)."""
        self.entries: list[Outcome] = []
        self.numbered_batches: list[NumberedBatch] = []
        self.keeps_notes = notes
        self.closed = False
        self.sequences = EndedSequences()
        self.cond = threading.Condition()
        self.wake = wake

    def report(self, entries: list[Outcome], spans: list[SequenceSpan] = ()) -> None:
        """`entries` ended; `spans` are the sequence numbers of those that were numbered."""
        with self.cond:
            self.entries.extend(entries)
            for span in spans:
                self.sequences.ended(SequenceSpan(*span))
            self._news()

    def noted(self, batches: list[Any]) -> None:
        """These batches (MessageBatch) are on their way to a broker: note the numbered ones."""
        if not self.keeps_notes:
            return
        notes = [note for b in batches if (note := numbered_batch(b)) is not None]
        if notes:
            with self.cond:
                self.numbered_batches.extend(notes)

    def close(self) -> None:
        """Nothing more comes: the next take says so (`Reports.closed`)."""
        with self.cond:
            self.closed = True
            self._news()

    @property
    def has_news(self) -> bool:
        return bool(self.entries) or self.closed

    def take(self) -> Reports:
        """Every entry reported and every note since the last take."""
        with self.cond:
            out = Reports(self.entries, self.numbered_batches, self.closed)
            self.entries, self.numbered_batches = [], []
        return out

    def poll(self, timeout: float) -> Reports:
        """`take`, after waiting up to `timeout` s for the first entry (in a thread)."""
        with self.cond:
            if not self.has_news:
                self.cond.wait(timeout)
            return self.take()

    def first_unresolved(self, topic: str, partition: int, producer_id: int, numbering: int) -> int:
        """The first sequence number of the partition's numbering whose batch has not ended here."""
        with self.cond:
            return self.sequences.first_unresolved(topic, partition, producer_id, numbering)

    def ended_intervals(self) -> list[tuple[tuple[str, int, int, int], int, int]]:
        """The sequence numbers that ended here, as (key, start, end) intervals."""
        with self.cond:
            return self.sequences.intervals()

    def _news(self) -> None:
        self.cond.notify_all()
        if self.wake is not None:
            self.wake()


def report_failed(report: Callable[..., Any], batches: list[Any], error: Exception) -> None:
    """Report `batches` (MessageBatch) as failed with `error` through `report(outcomes, spans)`
    (a Mailbox's `report`, or the RetryHandler's `report.remote`); control batches carry no message."""
    ended = [b for b in batches if len(b.ids) and not b.is_control]
    if ended:
        report([Outcome.failed(b.ids, error, b.topic, b.partition) for b in ended],
               [span for b in ended if (span := sequence_span(b)) is not None])
