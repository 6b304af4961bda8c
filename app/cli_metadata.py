"""`raykafka metadata`: the cluster's brokers and topics with their partitions, as kcat -L lists them.

    raykafka metadata -b HOST:PORT [-t TOPIC]... [-f text|json] [-X key=value]...

One Metadata request through `Admin` (no Ray). Without -t every topic is listed; a topic named
with -t that does not exist is listed with its error (UNKNOWN_TOPIC_OR_PARTITION), and the exit
status is then EXIT_ERROR, as for any partition or topic the broker reports an error for.
`-f json` prints one JSON object: cluster_id, controller_id, brokers, topics.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..wire.cluster import Metadata
from ..wire.errors import code_for
from .args import EXIT_ERROR, EXIT_OK, add_client_options, client_config


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("metadata", help="list brokers, topics and partitions (kcat -L)")
    add_client_options(p)
    p.add_argument("-t", "--topic", action="append", help="only this topic (may be given again)")
    p.add_argument("-f", "--format", choices=["text", "json"], default="text", help="how to print")
    p.set_defaults(func=cmd_metadata)


def cmd_metadata(args: argparse.Namespace) -> int:
    from ..driver.admin import Admin

    with Admin(client_config(args)) as admin:
        metadata = admin.metadata(args.topic)
    described = as_dict(metadata)
    print(json.dumps(described) if args.format == "json" else as_text(described, args.brokers, args.topic))
    errors = [t for t in described["topics"] if t["error"]] + [
        p for t in described["topics"] for p in t["partitions"] if p["error"]]
    return EXIT_ERROR if errors else EXIT_OK


def as_dict(metadata: Metadata) -> dict[str, Any]:
    """The metadata as plain JSON types: brokers by node id, topics by name, partitions by number."""
    return {
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id,
        "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for _, b in sorted(metadata.brokers.items())],
        "topics": [{
            "topic": name,
            "error": _error(topic.error_code),
            "is_internal": topic.is_internal,
            "partitions": [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas), "isrs": list(p.isr), "error": _error(p.error_code)}
                           for _, p in sorted(topic.partitions.items())],
        } for name, topic in sorted(metadata.topics.items())],
    }


def as_text(described: dict[str, Any], bootstrap: str, wanted: list[str] | None = None) -> str:
    """kcat -L's layout."""
    brokers, topics = described["brokers"], described["topics"]
    lines = [f"Metadata for {'all topics' if not wanted else ', '.join(map(repr, wanted))} "
             f"(from {bootstrap}; cluster {described['cluster_id'] or '-'}):",
             f" {len(brokers)} brokers:"]
    for b in brokers:
        controller = " (controller)" if b["id"] == described["controller_id"] else ""
        lines.append(f"  broker {b['id']} at {b['host']}:{b['port']}{controller}")
    lines.append(f" {len(topics)} topics:")
    for t in topics:
        error = f": {t['error']}" if t["error"] else ""
        lines.append(f"  topic \"{t['topic']}\" with {len(t['partitions'])} partitions{error}")
        for p in t["partitions"]:
            error = f": {p['error']}" if p["error"] else ""
            lines.append(f"    partition {p['partition']}, leader {p['leader']}, replicas: "
                         f"{','.join(map(str, p['replicas']))}, isrs: {','.join(map(str, p['isrs']))}{error}")
    return "\n".join(lines)


def _error(code: int) -> str | None:
    return code_for(code).name if code else None

