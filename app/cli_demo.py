"""`raykafka demo`: the main job (see app/demo.py).

Prints the demo's own lines, a one-line summary, then where each side's time went, phase by
phase; Ray's and Spark's output goes to a log file named in the summary, unless `-v`. `--plot`
writes a PNG of the write and read rates and those phases (it needs matplotlib, from the bench
extra, and says so before anything starts when it is missing).
`--exactly-once` runs the other demo (app/demo_exactly_once.py): Kafka → Spark → Kafka with
`exactly_once=True` and the writer killed mid-run, checked read_committed; it exits 1 if a row
is missing or doubled.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

PLOT_DEFAULT = "raykafka-demo-rates.png"


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the main job: Spark → Kafka → Ray consumer group → Spark, on an embedded broker")
    demo.add_argument("--rows", type=int, default=None,
                      help="synthetic events to generate (default 1,000,000; 200,000 with --exactly-once)")
    demo.add_argument("--partitions", type=int, default=6, help="partitions of the demo's topic")
    demo.add_argument("--members", type=int, default=2, help="consumer group members (Ray actors)")
    demo.add_argument("-v", "--verbose", action="store_true",
                      help="show Ray's and Spark's own output (else it goes to a log file named at the end)")
    demo.add_argument("--plot", nargs="?", const=PLOT_DEFAULT, default=None, metavar="PNG",
                      help=f"write a timeline of the write and read rates and phases as a PNG (default {PLOT_DEFAULT}); "
                           "needs matplotlib: pip install 'raykafka[bench]'")
    demo.add_argument("--exactly-once", action="store_true",
                      help="Kafka → Spark transform → Kafka with exactly_once=True, the writer killed mid-run; "
                           "checks read_committed that every input is in the output once")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .demo import plot_rates, quiet_stderr, run_demo

    if args.exactly_once:
        return run_exactly_once(args)
    if args.rows is None:
        args.rows = 1_000_000
    if args.rows < 1 or args.partitions < 1 or args.members < 1:
        raise ValueError("--rows, --partitions and --members must be at least 1")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("raykafka demo: --plot needs matplotlib, in the bench extra: pip install 'raykafka[bench]'",
                  file=sys.stderr)
            return 2
    logging.getLogger("ray").setLevel(logging.INFO if args.verbose else logging.WARNING)
    with quiet_stderr(args.verbose) as (progress, log_path):
        report = run_demo(rows=args.rows, partitions=args.partitions, members=args.members, progress_stream=progress)
        plot = plot_rates(report.timeline, report.phases, Path(args.plot)) if args.plot is not None else None
    write, read = report.phases.sides
    print(f"summary  {report.rows:,} events written at {write.rate_figure} and read at {read.rate_figure}, "
          "every count checked" + (f"; rates and phases plotted in {plot}" if plot else "")
          + (f"; Ray and Spark logged to {log_path}" if log_path else ""), flush=True)
    print("\n".join(report.phases.lines()), flush=True)
    return 0


def run_exactly_once(args: argparse.Namespace) -> int:
    from .demo import quiet_stderr
    from .demo_exactly_once import run_exactly_once_demo

    rows = 200_000 if args.rows is None else args.rows
    if rows < 1 or args.partitions < 1:
        raise ValueError("--rows and --partitions must be at least 1")
    if args.plot is not None:
        raise ValueError("--plot draws the main demo's rates; --exactly-once has none")
    logging.getLogger("ray").setLevel(logging.INFO if args.verbose else logging.WARNING)
    with quiet_stderr(args.verbose) as (_, log_path):
        try:
            report = run_exactly_once_demo(rows=rows, partitions=args.partitions)
        except AssertionError as exc:
            print(f"summary  FAILED: {exc}" + (f"; Ray and Spark logged to {log_path}" if log_path else ""), flush=True)
            return 1
    print(f"summary  {report.rows:,} events through Kafka → Spark → Kafka exactly once: {report.committed:,} "
          f"read_committed, {report.duplicates} duplicates, {report.missing} missing"
          + (f"; Ray and Spark logged to {log_path}" if log_path else ""), flush=True)
    return 0
