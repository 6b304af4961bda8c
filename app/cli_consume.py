"""`raykafka consume`: print a topic's messages, as kcat -C does.

    raykafka consume -b HOST:PORT -t TOPIC|^PATTERN [-g GROUP] [-o beginning|end|OFFSET] [-c COUNT] [-e]
                     [-f value|json|FORMAT] [-X key=value]...

A -t that starts with `^` is a pattern (librdkafka's rule, wire/subscription.py): every topic
whose whole name matches is read, with -g and without. With -e, the topics it matches when the
command starts are read to their ends (none matching is an error then, as a missing topic is);
otherwise a topic that comes to match later is read too (the `Consumer` and the group look the
topics up again every `metadata.max.age.ms`): from its beginning, or with -g from -o's start.

Without -g every partition is assigned through a `Consumer` (Ray actors); with -e and no Ray
cluster to join, the partitions are read to their ends in this process instead, with the bounded
reader of Ray Data's read tasks (`wire.range_reader`), and no Ray is started. With -g this
process joins the group as one member (the member runtime runs in-process, so it prints here).
-e exits once every partition is at its end (a topic that does not exist is an error then),
-c after COUNT messages; otherwise it runs until SIGINT or SIGTERM, then leaves the group,
commits what it printed, flushes and exits 0. A second signal does not cut that short (it says
the commit is under way); a third exits at once, without committing.
With `-X key.deserializer=...` / `-X value.deserializer=...` keys and values print as
deserialized: text as it is, parsed json or msgpack as JSON.

`-f` takes `value` (each value on a line, the default), `json` (an object a line) or a format
string as kcat's: %t topic, %p partition, %o offset, %k key, %s value, %T timestamp (ms, -1 for
none), %h headers (k=v,k=v), %K and %S the key's and value's lengths (-1 for null), %% a percent
sign; \n, \r, \t, \0 and \\ are escapes. A format string adds no newline of its own, and writes
keys and values as the bytes they are. With -c or -e a progress bar counts the messages on
stderr, when stderr is a terminal (app/progress.py).
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

from ..wire.subscription import TopicSubscription, is_pattern
from .args import EXIT_OK, UsageError, add_client_options, client_config, counted
from .progress import bar, printing


class _Stop(Exception):
    pass


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("consume", help="print messages from a topic, or from every topic a ^pattern matches")
    add_client_options(p, "consumer")
    p.add_argument("-t", "--topic", required=True,
                   help="the topic to read; one that starts with ^ is a pattern ('^orders-.*'): every topic whose "
                   "whole name matches it is read")
    p.add_argument("-g", "--group", help="consume as a member of this group; a partition without a committed offset "
                   "starts at -o: the beginning by default, as kcat's, to show what the topic holds (the Python "
                   "API starts a group at auto.offset.reset, latest by default as in Kafka, so that a new group "
                   "of a running job takes new records only)")
    p.add_argument("-o", "--offset", default="beginning",
                   help="beginning, end, or an offset (negative: from the end); with -g beginning or end")
    p.add_argument("-c", "--count", type=int, help="exit after COUNT messages")
    p.add_argument("-e", "--exit-at-end", action="store_true",
                   help="exit at the end of every partition (the topic must exist; a pattern must match one)")
    p.add_argument("-f", "--format", default="value", metavar="FORMAT",
                   help="value, json, or a kcat format string such as '%%t %%p %%o %%k %%s\\n'")
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


def _bytes(raw: Any) -> bytes:
    """A key or value as the bytes a format string writes: bytes as they are, the rest as `_text`."""
    if isinstance(raw, bytes):
        return raw
    text = _text(raw)
    return b"" if text is None else text.encode()


def _length(raw: Any) -> bytes:
    return b"-1" if raw is None else str(len(_bytes(raw))).encode()


# kcat's format tokens: each letter -> the bytes it writes for one row
TOKENS = {
    "t": lambda row: row["topic"].encode(),
    "p": lambda row: str(row["partition"]).encode(),
    "o": lambda row: str(row["offset"]).encode(),
    "k": lambda row: _bytes(row["key"]),
    "s": lambda row: _bytes(row["value"]),
    "K": lambda row: _length(row["key"]),
    "S": lambda row: _length(row["value"]),
    "T": lambda row: str(row["timestamp_ms"]).encode(),
    "h": lambda row: b",".join(h["key"].encode() + b"=" + _bytes(h["value"]) for h in row["headers"]),
}
ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "0": b"\0", "\\": b"\\"}


def compile_format(fmt: str) -> list[bytes | str]:
    """A kcat format string as literal bytes and token letters, in order (`UsageError` naming an
    unknown token or escape)."""
    parts: list[bytes | str] = []
    literal = bytearray()
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 == len(fmt):
            raise UsageError(f"-f: {fmt!r} ends inside {'a token' if c == '%' else 'an escape'}")
        if c == "%":
            letter = fmt[i + 1]
            if letter == "%":
                literal += b"%"
            elif letter in TOKENS:
                parts += [bytes(literal), letter] if literal else [letter]
                literal = bytearray()
            else:
                raise UsageError(f"-f: unknown token %{letter} in {fmt!r}; known: "
                                 + " ".join("%" + t for t in TOKENS) + " %%")
            i += 2
        elif c == "\\":
            escaped = ESCAPES.get(fmt[i + 1])
            if escaped is None:
                raise UsageError(f"-f: unknown escape \\{fmt[i + 1]} in {fmt!r}; known: \\n \\r \\t \\0 \\\\")
            literal += escaped
            i += 2
        else:
            literal += c.encode()
            i += 1
    if literal:
        parts.append(bytes(literal))
    return parts


class Formatter:
    """Renders a batch's records as bytes: `value`, `json`, or a compiled kcat format string."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.parts = None if fmt in ("value", "json") else compile_format(fmt)

    def render(self, batch: pa.RecordBatch, limit: int | None = None) -> bytes:
        """Records of `batch` (up to `limit`) as they are printed."""
        if limit is not None:
            batch = batch.slice(0, limit)
        if batch.num_rows == 0:
            return b""
        if self.fmt == "value":
            return "".join((_text(v) or "") + "\n" for v in batch.column("value").to_pylist()).encode()
        stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()  # ms since the epoch, as stored
        rows = batch.to_pylist()
        for row, stamp in zip(rows, stamps, strict=True):
            row["timestamp_ms"] = -1 if stamp is None else stamp
        if self.parts is None:
            return "".join(json.dumps({
                "topic": row["topic"], "partition": row["partition"], "offset": row["offset"],
                "key": _field(row["key"]), "value": _field(row["value"]),
                "timestamp": None if row["timestamp"] is None else row["timestamp_ms"],
                "headers": [[h["key"], _text(h["value"])] for h in row["headers"]],
            }, default=_jsonable) + "\n" for row in rows).encode()
        parts = self.parts
        return b"".join(part if isinstance(part, bytes) else TOKENS[part](row) for row in rows for part in parts)


class _Printer:
    """Counts and prints records, and moves the progress bar; thread-safe (group claims print
    from their own threads)."""

    def __init__(self, formatter: Formatter, count: int | None, progress: Any):
        self.formatter = formatter
        self.remaining = count
        self.printed = 0
        self.progress = progress
        self.lock = threading.Lock()
        self.done = threading.Event()

    def take(self, batch: pa.RecordBatch) -> int:
        """Print what fits; return how many rows of `batch` were printed."""
        with self.lock:
            if self.done.is_set():
                return 0
            n = batch.num_rows if self.remaining is None else min(batch.num_rows, self.remaining)
            out = self.formatter.render(batch, n)
            if out:
                with printing(self.progress):
                    sys.stdout.flush()
                    sys.stdout.buffer.write(out)
                    sys.stdout.buffer.flush()
            self.printed += n
            self.progress.update(n)
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
    config = client_config(args)
    formatter = Formatter(args.format)  # a bad format string is a usage error before anything starts
    if is_pattern(args.topic):
        TopicSubscription.of(args.topic)  # as is a pattern that is no regular expression
    if args.count is not None and args.count < 1:
        raise UsageError(f"-c: at least 1, got {args.count}")
    # a run until Ctrl-C has no end to make progress towards: no bar
    progress = bar(f"consume {args.topic}", total=args.count, enabled=args.count is not None or args.exit_at_end)
    printer = _Printer(formatter, args.count, progress)
    interrupts = _Interrupts("leaving the group and committing what was printed" if args.group
                             else "closing the consumer")
    interrupts.install()
    try:
        if args.group:
            _consume_group(args, config, printer, interrupts)
        else:
            _consume_assigned(args, config, printer, interrupts)
    finally:
        progress.close()
        sys.stdout.flush()
        interrupts.uninstall()
    print(f"raykafka: {counted(printer.printed, 'message')}", file=sys.stderr)
    return EXIT_OK


# `consume -e` without Ray reads this many records of each partition per round (`_consume_to_end_here`)
SLICE_RECORDS = 50_000


def _start(offset: str) -> Any:
    if offset in ("beginning", "earliest", "oldest"):
        return "earliest"
    if offset in ("end", "latest", "newest"):
        return "latest"
    try:
        return int(offset)
    except ValueError:
        raise UsageError(f"-o: expected beginning, end or an offset, got {offset!r}") from None


def _reads_here(args: argparse.Namespace, start: Any) -> bool:
    """Whether `consume` reads in this process, without Ray: to the end (-e), from the beginning,
    the end or an offset, with no Ray cluster to join (none runs here, `RAY_ADDRESS` names none).
    Starting a whole local Ray for a terminal command costs seconds; a running one is joined."""
    if not args.exit_at_end or (isinstance(start, int) and start < 0):
        return False
    from ..driver.ray_runtime import ray_to_join

    return not ray_to_join()


def _consume_to_end_here(args: argparse.Namespace, config: dict[str, Any], printer: _Printer,
                         interrupts: _Interrupts, start: Any) -> None:
    """-e in this process: each partition's range to its end now, read by the bounded reader Ray
    Data's read tasks use (`wire.range_reader`), `SLICE_RECORDS` of every partition at a time,
    so memory stays bounded whatever the topic holds. Deserializers apply as in a `Consumer`."""
    from ..spark_bridge.offsets import PartitionRange, resolve_ranges
    from ..wire.config import parse_config
    from ..wire.range_reader import read_ranges
    from ..wire.serde import Deserializers

    deserialize = Deserializers.from_config(parse_config(config))
    try:
        with interrupts.waiting():
            if is_pattern(args.topic):
                ranges = resolve_ranges(config, None, "earliest", "latest", subscribe_pattern=args.topic)
                _require_match(args.topic, {r.topic for r in ranges})
            else:
                ranges = resolve_ranges(config, [args.topic], "earliest", "latest")
        if start == "latest":
            return
        if isinstance(start, int):
            _say_past_end(start, {(r.topic, r.partition): r.end for r in ranges})
            ranges = [PartitionRange(r.topic, r.partition, max(r.start, start), r.end) for r in ranges]
        while not printer.done.is_set():
            slices = [PartitionRange(r.topic, r.partition, r.start, min(r.end, r.start + SLICE_RECORDS))
                      for r in ranges if r.count]
            if not slices:
                return
            with interrupts.waiting():
                tables = list(read_ranges(config, slices))
            for table in tables:
                for batch in table.to_batches():
                    printer.take(deserialize(batch))
            ranges = [PartitionRange(r.topic, r.partition, min(r.end, r.start + SLICE_RECORDS), r.end)
                      for r in ranges]
    except _Stop:
        pass


def _consume_assigned(args: argparse.Namespace, config: dict[str, Any], printer: _Printer,
                      interrupts: _Interrupts) -> None:
    from ..driver.consumer import Consumer

    start = _start(args.offset)
    if _reads_here(args, start):
        _consume_to_end_here(args, config, printer, interrupts, start)
        return
    consumer = Consumer(config)
    try:
        with interrupts.waiting():
            started = consumer.assign_topic(args.topic, start)  # a pattern's by (topic, partition)
            keys = sorted(started) if is_pattern(args.topic) else [(args.topic, p) for p in sorted(started)]
            if is_pattern(args.topic) and args.exit_at_end:
                _require_match(args.topic, {topic for topic, _ in keys})
            if isinstance(start, int) and start >= 0:
                ends: dict[tuple[str, int], int] = {}
                for topic in sorted({topic for topic, _ in keys}):
                    ends.update({(topic, p): end for p, end in consumer.high_watermarks(
                        topic, [p for t, p in keys if t == topic]).items()})
                _say_past_end(start, ends)
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


def _say_past_end(start: int, ends: dict[tuple[str, int], int]) -> None:
    """A line on stderr for each topic naming its partitions whose end (`ends` by topic and
    partition) is below an offset -o asked for: there is nothing at that offset to read (yet)."""
    for topic in sorted({topic for topic, _ in ends}):
        mine = {p: end for (t, p), end in ends.items() if t == topic}
        past = sorted(p for p, end in mine.items() if end < start)
        if past:
            where = "every partition" if len(past) == len(mine) else f"partitions {', '.join(map(str, past))}"
            print(f"raykafka: offset {start} is past the end of {where} of {topic} "
                  f"(ends: {', '.join(f'{p}:{mine[p]}' for p in past)})", file=sys.stderr)


def _consume_group(args: argparse.Namespace, config: dict[str, Any], printer: _Printer,
                   interrupts: _Interrupts) -> None:
    from ..actors.group_member import MemberRuntime
    from ..wire.errors import ConsumerError

    start = _start(args.offset)
    if isinstance(start, int):
        raise UsageError("-o: with -g only beginning or end (the group's committed offsets come first)")
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
    """The topic exists, or a topic matches the pattern (an `UnknownTopicError` if not)."""
    from ..driver.admin import Admin
    from ..wire.config import common_part
    from ..wire.errors import UnknownTopicError

    with Admin(common_part(config)) as admin:
        existing = admin.list_topics()
    if is_pattern(topic):
        _require_match(topic, TopicSubscription.of(topic).topics(existing))
    elif topic not in existing:
        raise UnknownTopicError(f"topic {topic!r} does not exist")


def _require_match(pattern: str, matched: Any) -> None:
    """With -e a pattern must match a topic, as a name must be one (else there is no end to
    reach, and a group would wait for one to appear)."""
    from ..wire.errors import UnknownTopicError

    if not matched:
        raise UnknownTopicError(f"no topic matches the pattern {pattern!r}")


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
