"""What a group member's handler sees for one generation: a `Session` of `Claim`s.

Cardinality: one `Session` per generation a member takes part in (under the cooperative
protocol, one across the generations it rejoins in), one `Claim` per partition it is given,
made for the member's `MemberRuntime` (`actors/group_member_state.py`), the claims by its
`ClaimReader` (`actors/claim_reader.py`). Called by: the user's handler, each claim's in its own
thread (`Claim.batches`, `Session.mark`, `Session.commit`, `Session.group_metadata`), and the
reader's fetch loop (`Claim.put`, `fail`, `close`). Calls: the runtime, through `SessionOwner`, to commit. No Ray here.

Order kept: per claim, batches reach the handler in offset order; a claim's queue holds at most
`CLAIM_QUEUE` of them (the fetch loop leaves a full claim out of its fetches). A plain function
as the handler becomes a `FunctionHandler`, which marks each batch once the function returns.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from ..wire.errors import ConsumerError
from ..wire.group_coordinator import Generation, GroupCoordinator

log = logging.getLogger("raykafka.actors.group_member")

CLAIM_QUEUE = 4  # Arrow batches waiting per claim before its fetching pauses
_CLOSED = object()


class SessionOwner(Protocol):
    """What a `Session` takes from the member that runs it (`MemberRuntime`): the coordinator
    (group id, instance id), the count of handler failures a mark resets, and the commit."""

    coordinator: GroupCoordinator
    handler_failures: int

    def run_on_loop(self, coro: Any) -> Any: ...

    async def commit_session(self, session: Session) -> None: ...


class Claim:
    """One partition of a session: its batches, in offset order, until the session ends or the
    partition fails (then `error` says why, after the batches fetched before it)."""

    def __init__(self, topic: str, partition: int, initial_offset: int,
                 deserialize: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None):
        self.topic = topic
        self.partition = partition
        self.initial_offset = initial_offset
        self.high_watermark = -1
        self.fetched_to = initial_offset  # the next offset to fetch (past control markers and aborted records)
        self.handed_end = initial_offset  # past the last record put in the queue
        self.error: ConsumerError | None = None
        self._queue: queue.Queue = queue.Queue()  # bounded by `full`, so the end marker always fits
        self._closed = threading.Event()
        self._deserialize = deserialize
        self._waiting_lock = threading.Lock()
        self._waiting_since: float | None = None  # when the oldest batch not yet taken was queued

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Batches in offset order, deserialized here, in the handler's thread."""
        while True:
            item = self._queue.get()
            if item is _CLOSED:
                return
            with self._waiting_lock:  # the handler took one: what is left waits from now
                self._waiting_since = time.monotonic() if self._queue.qsize() else None
            yield item if self._deserialize is None else self._deserialize(item)

    @property
    def full(self) -> bool:
        return self._queue.qsize() >= CLAIM_QUEUE

    def behind(self, now: float, max_processing: float) -> bool:
        """Its handler has left a batch untaken for more than `max_processing` seconds."""
        with self._waiting_lock:
            return self._waiting_since is not None and now - self._waiting_since > max_processing

    @property
    def done(self) -> bool:
        """Closed or failed: nothing more is fetched for it."""
        return self._closed.is_set() or self.error is not None

    def put(self, batch: pa.RecordBatch) -> None:
        with self._waiting_lock:
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            self._queue.put_nowait(batch)
            self.handed_end = batch.column("offset")[-1].as_py() + 1

    def fail(self, error: ConsumerError) -> None:
        """The partition cannot be read on: hand out what came before, then end with `error`."""
        if not self.done:
            self.error = error
            self._queue.put_nowait(_CLOSED)

    def close(self) -> None:
        """Drop what is queued (the next owner refetches it from the committed offset) and end."""
        self._closed.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put_nowait(_CLOSED)


class GroupMetadata(NamedTuple):
    """The member's place in its group for one generation (Java's ConsumerGroupMetadata): what
    `Producer.send_offsets_to_transaction` takes, so that a transaction's offsets commit only
    for the generation that consumed them."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class Session:
    """What a handler sees for one generation: its claims, `mark` and `commit`. Under the
    cooperative protocol one session spans the generations its member rejoins in: `claims` and
    `generation_id` follow the rebalances, `setup` and `cleanup` run once, and a revoked
    partition's `consume_claim` returns as its claim closes."""

    def __init__(self, runtime: SessionOwner, generation: Generation, claims: dict[tuple[str, int], Claim]):
        self._runtime = runtime
        self.member_id = generation.member_id
        self.generation_id = generation.generation_id
        self._claims = claims
        self.claims_changed()
        self.marked: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.ended = False  # committed for the last time: later marks belong to no generation
        self._lock = threading.Lock()

    def claim_list(self) -> list[Claim]:
        """The claims now (a cooperative rejoin changes them from the member's loop)."""
        with self._lock:
            return list(self._claims.values())

    def claims_changed(self) -> None:
        """`claims` ({topic: [partitions]}) again, after a cooperative rejoin changed them."""
        self.claims = {t: sorted(p for (tt, p) in self._claims if tt == t) for t in {t for t, _ in self._claims}}

    def group_metadata(self) -> GroupMetadata:
        """This generation's group id, generation id, member id and instance id, for
        consume-transform-produce:

            md = session.group_metadata()
            producer.send_offsets_to_transaction(offsets, md.group_id, generation_id=md.generation_id,
                                                 member_id=md.member_id, group_instance_id=md.group_instance_id)
        """
        c = self._runtime.coordinator
        return GroupMetadata(c.group_id, self.generation_id, self.member_id, c.instance_id)

    def mark(self, topic: str, partition: int, offset: int) -> None:
        """Record `offset` as the next one to consume in `topic`/`partition` (committed later)."""
        with self._lock:  # checked under the lock a revoke forgets a claim under
            if (topic, partition) not in self._claims:
                raise ValueError(f"{topic}/{partition} is not claimed by this session")
            if self.ended:
                log.warning("group/%s/%d marked after generation %d ended: not committed", topic, partition,
                            self.generation_id)
                return
            if offset > self.marked.get((topic, partition), -1):
                self.marked[(topic, partition)] = offset
                self._runtime.handler_failures = 0  # progress: the handler works again

    def mark_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self.mark(batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py(),
                      batch.column("offset")[-1].as_py() + 1)

    def lag(self) -> int:
        """Records of its claims its handler has not handled yet: each claim's high watermark (as
        the last fetch saw it) less its fetch position, plus what was handed out and not marked.
        Offsets that hold no record for a handler (transaction markers, aborted records) are
        fetched past and count none; a claim not fetched yet counts none."""
        with self._lock:
            return sum(max(0, claim.high_watermark - claim.fetched_to)
                       + max(0, claim.handed_end - self.marked.get(tp, claim.initial_offset))
                       for tp, claim in list(self._claims.items()) if claim.high_watermark >= 0)

    def uncommitted(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {tp: o for tp, o in self.marked.items() if self.committed.get(tp) != o}

    def commit(self) -> None:
        """Commit what is marked, now (from a handler thread)."""
        self._runtime.run_on_loop(self._runtime.commit_session(self))


class FunctionHandler:
    """A plain function applied to each batch; the batch is marked once the function returns."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any]):
        self.fn = fn

    def setup(self, session: Session) -> None:
        pass

    def consume_claim(self, session: Session, claim: Claim) -> None:
        for batch in claim.batches():
            self.fn(batch)
            session.mark_batch(batch)

    def cleanup(self, session: Session) -> None:
        pass


def as_handler(handler: Any) -> Any:
    if hasattr(handler, "consume_claim"):
        return handler
    if callable(handler):
        return FunctionHandler(handler)
    raise TypeError(f"handler: expected a function of a batch or an object with consume_claim, got {handler!r}")
