"""`raykafka produce -b HOST:PORT -t TOPIC [-K SEP] [-X key=value]...`: one message per stdin line.

With `-K SEP` the text before the first SEP is the key (a line without SEP has no key). A summary
goes to stderr; the exit status is 0 only when every line was delivered. Ray is started locally
(quietly) unless the program is already connected to a cluster.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

CHUNK = 10_000  # lines handed to send_batch at a time


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("produce", help="send stdin lines as messages")
    parser.add_argument("-b", "--brokers", required=True, help="bootstrap servers, host:port[,host:port]")
    parser.add_argument("-t", "--topic", required=True)
    parser.add_argument("-K", dest="key_separator", metavar="SEP", help="split each line into key SEP value")
    parser.add_argument("-p", "--partition", type=int, default=None, help="send every line to this partition")
    parser.add_argument("-X", action="append", metavar="key=value", help="producer property")
    parser.set_defaults(func=cmd_produce)


def cmd_produce(args: argparse.Namespace, stdin: Any = None) -> int:
    from .cli import _properties
    from .producer import Producer
    from .ray_runtime import ensure_ray

    config = {"bootstrap.servers": args.brokers, **_properties(args.X)}
    ensure_ray()
    stream = stdin if stdin is not None else sys.stdin.buffer
    sep = args.key_separator.encode() if args.key_separator else None
    futures = []
    lines = 0
    with Producer(config) as producer:
        chunk: list[bytes] = []
        for raw in stream:
            chunk.append(raw.rstrip(b"\r\n") if isinstance(raw, bytes) else raw.rstrip("\r\n").encode())
            if len(chunk) >= CHUNK:
                futures.append(_send(producer, args, chunk, sep))
                lines += len(chunk)
                chunk = []
        if chunk:
            futures.append(_send(producer, args, chunk, sep))
            lines += len(chunk)
        producer.flush()
    delivered = failed = 0
    causes: dict[str, int] = {}
    for future in futures:
        result = future.result()
        delivered += result.delivered
        failed += result.failed
        for error in result.errors:
            if error is not None:
                causes[str(error)] = causes.get(str(error), 0) + 1
    print(f"raykafka produce: {delivered} delivered, {failed} failed of {lines} lines to {args.topic}",
          file=sys.stderr)
    for cause, count in sorted(causes.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {count} x {cause}", file=sys.stderr)
    return 0 if failed == 0 and delivered == lines else 1


def _send(producer: Any, args: argparse.Namespace, lines: list[bytes], sep: bytes | None) -> Any:
    keys = None
    values = lines
    if sep is not None:
        split = [line.split(sep, 1) for line in lines]
        keys = [parts[0] if len(parts) == 2 else None for parts in split]
        values = [parts[-1] for parts in split]
    partitions = None if args.partition is None else [args.partition] * len(values)
    return producer.send_batch(args.topic, values, keys=keys, partitions=partitions)
