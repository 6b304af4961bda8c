"""`raykafka consume`: print a topic's messages, as kcat -C does.

    raykafka consume -b HOST:PORT -t TOPIC [-g GROUP] [-o beginning|end|OFFSET] [-c COUNT] [-e]
                     [-f value|json] [-X key=value]...

Without -g every partition is assigned through a `Consumer` (Ray actors); with -g this process
joins the group as one member (the member runtime runs in-process, so it prints here).
-e exits once every partition is at its end (a topic that does not exist is an error then),
-c after COUNT messages; otherwise it runs until SIGINT or SIGTERM, then leaves the group,
commits what it printed, flushes and exits 0. A second signal does not cut that short (it says
the commit is under way); a third exits at once, without committing.
With `-X key.deserializer=...` / `-X value.deserializer=...` keys and values print as
deserialized: text as it is, parsed json or msgpack as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa


class _Stop(Exception):
    pass


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("consume", help="print messages from a topic")
    p.add_argument("-b", "--brokers", required=True, help="bootstrap servers, host:port[,host:port]")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", help="consume as a member of this group")
    p.add_argument("-o", "--offset", default="beginning", help="beginning, end, or an offset (negative: from the end)")
    p.add_argument("-c", "--count", type=int, help="exit after COUNT messages")
    p.add_argument("-e", "--exit-at-end", action="store_true",
                   help="exit at the end of every partition (the topic must exist)")
    p.add_argument("-f", "--format", choices=["value", "json"], default="value")
    p.add_argument("-X", action="append", metavar="key=value", help="client property")
    p.set_defaults(func=cmd_consume)


def _text(raw: Any) -> str | None:
    """A key or value as text: bytes decoded (bad UTF-8 replaced), text as it is, anything a
    deserializer parsed as JSON."""
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return json.dumps(raw, default=_jsonable, separators=(",", ":"))


def _jsonable(obj: Any) -> Any:
    """What json cannot write itself, in the values Arrow gives back (bytes inside msgpack, times)."""
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return str(obj)


def _field(raw: Any) -> Any:
    """A key or value inside a `-f json` line: parsed values stay JSON, the rest is text."""
    return _text(raw) if raw is None or isinstance(raw, (str, bytes)) else raw


def format_batch(batch: pa.RecordBatch, fmt: str, limit: int | None = None) -> list[str]:
    """One line per record (up to `limit`)."""
    if limit is not None:
        batch = batch.slice(0, limit)
    if fmt == "value":
        return [_text(v) or "" for v in batch.column("value").to_pylist()]
    lines = []
    for row in batch.to_pylist():
        lines.append(json.dumps({
            "topic": row["topic"], "partition": row["partition"], "offset": row["offset"],
            "key": _field(row["key"]), "value": _field(row["value"]),
            "timestamp": int(row["timestamp"].timestamp() * 1000) if row["timestamp"] is not None else None,
            "headers": [[h["key"], _text(h["value"])] for h in row["headers"]],
        }, default=_jsonable))
    return lines


class _Printer:
    """Counts and prints lines; thread-safe (group claims print from their own threads)."""

    def __init__(self, fmt: str, count: int | None):
        self.fmt = fmt
        self.remaining = count
        self.printed = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def take(self, batch: pa.RecordBatch) -> int:
        """Print what fits; return how many rows of `batch` were printed."""
        with self.lock:
            if self.done.is_set():
                return 0
            n = batch.num_rows if self.remaining is None else min(batch.num_rows, self.remaining)
            lines = format_batch(batch, self.fmt, n)
            if lines:
                sys.stdout.write("\n".join(lines) + "\n")
            self.printed += n
            if self.remaining is not None:
                self.remaining -= n
                if self.remaining <= 0:
                    self.done.set()
            return n


class _Interrupts:
    """SIGINT and SIGTERM while consuming: the first stops (leave, commit what was printed, flush),
    the second only says that this is under way, the third exits at once without committing.

    The handler runs in the main thread; it raises `_Stop` only while the main thread sits in
    `waiting()` (a wait that nothing else ends), never while it leaves or commits."""

    def __init__(self, stopping_text: str):
        self.count = 0
        self.stopping = threading.Event()
        self.stopping_text = stopping_text
        self._waiting = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        self._previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def uninstall(self) -> None:
        """Hand signals back, unless one came: then the program is ending, and a later signal
        must not cut its last steps short."""
        if not self.count:
            for s, handler in self._previous.items():
                signal.signal(s, handler)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        if self.stopping.is_set():
            raise _Stop()
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.stopping.set()
            _say(f"raykafka: stopping: {self.stopping_text} (a third Ctrl-C exits at once)")
            if self._waiting:
                raise _Stop()
        elif self.count == 2:
            _say(f"raykafka: still stopping: {self.stopping_text}; Ctrl-C once more exits at once")
        else:  # no flush either: a writer stuck on a full stdout would hold it
            _say("raykafka: exiting at once, without committing or flushing")
            os._exit(130)


def _say(text: str) -> None:
    """One line on stderr, written straight to the file descriptor (safe inside a signal handler)."""
    os.write(2, (text + "\n").encode())


def cmd_consume(args: argparse.Namespace) -> int:
    from .cli import _properties

    config = {"bootstrap.servers": args.brokers, **_properties(args.X)}
    printer = _Printer(args.format, args.count)
    interrupts = _Interrupts("leaving the group and committing what was printed" if args.group
                             else "closing the consumer")
    interrupts.install()
    try:
        if args.group:
            _consume_group(args, config, printer, interrupts)
        else:
            _consume_assigned(args, config, printer, interrupts)
    finally:
        sys.stdout.flush()
        interrupts.uninstall()
    print(f"raykafka: {printer.printed} messages", file=sys.stderr)
    return 0


def _start(offset: str) -> Any:
    if offset in ("beginning", "earliest", "oldest"):
        return "earliest"
    if offset in ("end", "latest", "newest"):
        return "latest"
    try:
        return int(offset)
    except ValueError:
        raise ValueError(f"-o: expected beginning, end or an offset, got {offset!r}") from None


def _consume_assigned(args: argparse.Namespace, config: dict[str, Any], printer: _Printer,
                      interrupts: _Interrupts) -> None:
    from ..driver.consumer import Consumer

    consumer = Consumer(config)
    try:
        with interrupts.waiting():
            consumer.assign_topic(args.topic, _start(args.offset))
        batches = consumer.batches(until_end=args.exit_at_end)
        while not printer.done.is_set():
            with interrupts.waiting():
                batch = next(batches, None)
            if batch is None:
                break
            printer.take(batch)
    except _Stop:
        pass
    finally:
        sys.stdout.flush()
        consumer.close()


def _consume_group(args: argparse.Namespace, config: dict[str, Any], printer: _Printer,
                   interrupts: _Interrupts) -> None:
    from ..actors.group_member import MemberRuntime
    from ..wire.errors import ConsumerError

    start = _start(args.offset)
    if isinstance(start, int):
        raise ValueError("-o: with -g only beginning or end (the group's committed offsets come first)")
    config = {**config, "group.id": args.group, "auto.offset.reset": start}
    if args.exit_at_end:
        _require_topic(config, args.topic)  # else the group would wait for it to appear

    class PrintingHandler:
        def setup(self, session: Any) -> None:
            pass

        def consume_claim(self, session: Any, claim: Any) -> None:
            for batch in claim.batches():
                n = printer.take(batch)
                if n:
                    session.mark(claim.topic, claim.partition, batch.column("offset")[n - 1].as_py() + 1)

        def cleanup(self, session: Any) -> None:
            sys.stdout.flush()

    runtime = MemberRuntime(config, [args.topic], PrintingHandler())
    runtime.start()
    reported = 0
    try:  # the signal handler only sets `stopping` here: the wait below ends on it
        while not printer.done.is_set() and not interrupts.stopping.wait(0.1):
            if runtime.fatal:  # only a fatal error ends the member: it rides out broker outages
                raise ConsumerError(runtime.fatal)
            for error in runtime.errors[reported:]:  # a failed partition or handler: said, and it goes on
                print(f"raykafka: {error.kind} error: {error.cause}", file=sys.stderr)
                reported += 1
            if args.exit_at_end and _group_at_end(runtime):
                break
    finally:
        sys.stdout.flush()
        runtime.stop()


def _require_topic(config: dict[str, Any], topic: str) -> None:
    from ..driver.admin import Admin
    from ..wire.errors import UnknownTopicError

    with Admin(config) as admin:
        if topic not in admin.list_topics():
            raise UnknownTopicError(f"topic {topic!r} does not exist")


def _group_at_end(runtime: Any) -> bool:
    session = runtime.session
    if session is None or not session._claims:
        return False
    for tp, claim in session._claims.items():
        if claim.error is not None:
            continue  # failed, and said so: no end to reach
        position = session.marked.get(tp, claim.initial_offset)
        if claim.high_watermark < 0 or position < claim.high_watermark:
            return False
    return True
