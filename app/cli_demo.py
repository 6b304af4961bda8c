"""`raykafka demo`: the main job (see app/demo.py)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the main job: Spark → Kafka → Ray consumer group → Spark, on an embedded broker")
    demo.add_argument("--rows", type=int, default=1_000_000, help="synthetic events to generate (default 1,000,000)")
    demo.add_argument("--partitions", type=int, default=6)
    demo.add_argument("--members", type=int, default=2, help="consumer group members (Ray actors)")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging
    import os
    import warnings

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    logging.getLogger("ray").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    from .demo import run_demo

    if args.rows < 1 or args.partitions < 1 or args.members < 1:
        raise ValueError("--rows, --partitions and --members must be at least 1")
    run_demo(rows=args.rows, partitions=args.partitions, members=args.members)
    return 0
