"""`AggregatorState`: one per broker, inside its BrokerWorker (actors/broker_worker.py), without
Ray. Batches the messages of every partition the broker leads, by `linger.ms`, `batch.size` and
`batch.num.messages`, into Produce-sized sets for the worker's Flusher.

Called by its BrokerWorker only: `add` with a LeaderDispatcher's batches (in the order each
LeaderDispatcher sent them), `poll` from the worker's linger timer, `drain` at close, `observe`
with the compression ratios the Flusher measured. Calls nothing.

With compression, `batch.size` and `max.request.size` count bytes on the wire, as the Java
producer's do: a batch holds record bytes up to batch.size divided by the topic's compression
ratio, an estimate the Flusher corrects after every set it compresses (`observe`). Where the
estimate was too hopeful, the Flusher cuts the batch before it sends it.

Order kept: a partition's messages leave in the order they arrived; a control message (SYN, FIN,
SHUTDOWN) flushes everything buffered before it, so it stays in-band. A batch that comes back
from a retry is sent as it is (never merged or split), so its sequence numbers still match the
batch the broker may already have written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .batch import BATCH_OVERHEAD, REQUEST_OVERHEAD, Control, Entry, MessageBatch, ProduceSet

# the estimate of a topic's compression ratio: the largest measured in one set the Flusher sent, with this
# margin, and never below MIN_RATIO, which bounds a batch to 16 times batch.size in record bytes
RATIO_MARGIN = 1.1
MIN_RATIO = 1 / 16




@dataclass
class _RecordBatch:
    """One future record batch of one partition: the chunks it will be made of."""

    chunks: list[MessageBatch] = field(default_factory=list)
    count: int = 0
    nbytes: int = 0
    sealed: bool = False


class AggregatorState:
    """The batching rules, without Ray: `add` and `poll` return the entries ready for the flusher."""

    def __init__(self, linger_ms: int, batch_size: int, batch_num_messages: int, max_request_size: int):
        self.linger = linger_ms / 1000
        self.batch_size = batch_size
        self.batch_num_messages = batch_num_messages
        self.max_request_size = max_request_size
        self.queues: dict[tuple[str, int], list[_RecordBatch]] = {}
        self.oldest: float | None = None  # when the oldest buffered message arrived
        self.buffered = 0
        self.ratios: dict[str, float] = {}  # topic -> estimated compressed bytes per record byte

    def observe(self, ratios: dict[str, float]) -> None:
        """The compression ratios the Flusher measured (compressed bytes per record byte, by topic)."""
        for topic, ratio in ratios.items():
            self.ratios[topic] = min(1.0, max(MIN_RATIO, ratio * RATIO_MARGIN))

    def _batch_limit(self, topic: str) -> int:
        """Record bytes in one of the topic's batches: batch.size on the wire, by the estimate."""
        return int(self.batch_size / self.ratios.get(topic, 1.0))

    def add(self, batches: list[MessageBatch], now: float) -> list[Entry]:
        out: list[Entry] = []
        ready = False
        for batch in batches:
            if batch.is_control:
                out.extend(self.drain())
                out.append(Control(batch))
                ready = False
                continue
            if not len(batch):
                continue
            for piece in self._pieces(batch):
                ready |= self._append(piece)
            if self.oldest is None:
                self.oldest = now
        if ready:
            out.extend(self.drain())
        return out

    def poll(self, now: float) -> list[Entry]:
        """Everything buffered, once the oldest message has lingered `linger.ms`."""
        if self.oldest is not None and now - self.oldest >= self.linger:
            return self.drain()
        return []

    def deadline(self) -> float | None:
        return None if self.oldest is None else self.oldest + self.linger

    def drain(self) -> list[Entry]:
        """All buffered messages as Produce sets: at most one record batch per partition per set,
        and at most `max.request.size` bytes per set (a single batch may exceed it alone)."""
        out: list[Entry] = []
        while self.queues:
            request: list[MessageBatch] = []
            size = REQUEST_OVERHEAD
            for tp in list(self.queues):
                queue = self.queues[tp]
                head = queue[0]
                wire = int(head.nbytes * self.ratios.get(tp[0], 1.0)) + BATCH_OVERHEAD
                if request and size + wire > self.max_request_size:
                    continue
                queue.pop(0)
                if not queue:
                    del self.queues[tp]
                size += wire
                request.append(MessageBatch.concat(head.chunks))
            out.append(ProduceSet(request))
        self.oldest = None
        self.buffered = 0
        return out

    # -- utilities ---------------------------------------------------------------

    def _pieces(self, batch: MessageBatch) -> list[MessageBatch]:
        """`batch` cut to `batch.size` / `batch.num.messages`; a retried batch is never cut."""
        n = len(batch)
        limit = self._batch_limit(batch.topic)
        if batch.retries > 0 or (n <= self.batch_num_messages and batch.nbytes <= limit):
            return [batch]
        per_record = max(1, batch.nbytes // n)
        step = max(1, min(self.batch_num_messages, limit // per_record))
        return [batch.slice(i, min(n, i + step)) for i in range(0, n, step)]

    def _append(self, piece: MessageBatch) -> bool:
        """Add a piece to its partition's queue; True when that queue now holds a full batch."""
        queue = self.queues.setdefault((piece.topic, piece.partition), [])
        self.buffered += piece.nbytes
        if piece.retries > 0:
            if queue:
                queue[-1].sealed = True
            queue.append(_RecordBatch([piece], len(piece), piece.nbytes, sealed=True))
            return True
        last = queue[-1] if queue else None
        limit = self._batch_limit(piece.topic)
        # a heal's resend (`possibly_written`, its `created_ms` from before the heal) never shares a
        # record batch with a message not sent before: a record batch has one flag and the oldest
        # `created_ms` of its pieces (`MessageBatch.concat`), so the fresh messages would time out
        # early, and as "outcome unknown"
        if (last is None or last.sealed or last.count + len(piece) > self.batch_num_messages
                or last.nbytes + piece.nbytes > limit or not piece.follows(last.chunks[-1])
                or piece.possibly_written != last.chunks[-1].possibly_written):
            if last is not None:
                last.sealed = True
            last = _RecordBatch()
            queue.append(last)
        last.chunks.append(piece)
        last.count += len(piece)
        last.nbytes += piece.nbytes
        return len(queue) > 1 or last.count >= self.batch_num_messages or last.nbytes >= limit
