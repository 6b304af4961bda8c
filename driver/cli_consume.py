"""`raykafka consume`: print a topic's messages, as kcat -C does.

    raykafka consume -b HOST:PORT -t TOPIC [-g GROUP] [-o beginning|end|OFFSET] [-c COUNT] [-e]
                     [-f value|json] [-X key=value]...

Without -g every partition is assigned through a `Consumer` (Ray actors); with -g this process
joins the group as one member (the member runtime runs in-process, so it prints here).
-e exits once every partition is at its end, -c after COUNT messages; otherwise it runs until
SIGINT or SIGTERM, then leaves the group, commits what it printed, flushes and exits 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
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
    p.add_argument("-e", "--exit-at-end", action="store_true", help="exit at the end of every partition")
    p.add_argument("-f", "--format", choices=["value", "json"], default="value")
    p.add_argument("-X", action="append", metavar="key=value", help="client property")
    p.set_defaults(func=cmd_consume)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", errors="replace")


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
            "key": _text(row["key"]), "value": _text(row["value"]),
            "timestamp": int(row["timestamp"].timestamp() * 1000) if row["timestamp"] is not None else None,
            "headers": [[h["key"], _text(h["value"])] for h in row["headers"]],
        }))
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


def cmd_consume(args: argparse.Namespace) -> int:
    from .cli import _properties

    config = {"bootstrap.servers": args.brokers, **_properties(args.X)}
    printer = _Printer(args.format, args.count)

    def on_signal(signum: int, frame: Any) -> None:
        raise _Stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if args.group:
            _consume_group(args, config, printer)
        else:
            _consume_assigned(args, config, printer)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.stdout.flush()
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


def _consume_assigned(args: argparse.Namespace, config: dict[str, Any], printer: _Printer) -> None:
    from .consumer import Consumer

    consumer = Consumer(config)
    try:
        consumer.assign_topic(args.topic, _start(args.offset))
        for batch in consumer.batches(until_end=args.exit_at_end):
            printer.take(batch)
            if printer.done.is_set():
                break
    except _Stop:
        pass
    finally:
        sys.stdout.flush()
        consumer.close()


def _consume_group(args: argparse.Namespace, config: dict[str, Any], printer: _Printer) -> None:
    from ..actors.group_member import MemberRuntime
    from ..wire.errors import ConsumerError

    start = _start(args.offset)
    if isinstance(start, int):
        raise ValueError("-o: with -g only beginning or end (the group's committed offsets come first)")
    config = {**config, "group.id": args.group, "auto.offset.reset": start}

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
    try:
        while not printer.done.is_set():
            if runtime.fatal:  # only a fatal error ends the member: it rides out broker outages
                raise ConsumerError(runtime.fatal)
            for error in runtime.errors[reported:]:  # a failed partition or handler: said, and it goes on
                print(f"raykafka: {error.kind} error: {error.cause}", file=sys.stderr)
                reported += 1
            if args.exit_at_end and _group_at_end(runtime):
                break
            time.sleep(0.1)
    except _Stop:
        pass
    finally:
        sys.stdout.flush()
        runtime.stop()


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
