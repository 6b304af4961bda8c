"""`raykafka demo`: the main job (see app/demo.py).

Prints the demo's own lines and a one-line summary; Ray's and Spark's output goes to a log file
named in the summary, unless `-v`. `--plot` writes a PNG of the write and read rates (it needs
matplotlib, from the bench extra, and says so before anything starts when it is missing).
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
    demo.add_argument("--rows", type=int, default=1_000_000, help="synthetic events to generate (default 1,000,000)")
    demo.add_argument("--partitions", type=int, default=6)
    demo.add_argument("--members", type=int, default=2, help="consumer group members (Ray actors)")
    demo.add_argument("-v", "--verbose", action="store_true",
                      help="show Ray's and Spark's own output (else it goes to a log file named at the end)")
    demo.add_argument("--plot", nargs="?", const=PLOT_DEFAULT, default=None, metavar="PNG",
                      help=f"write a timeline of the write and read rates as a PNG (default {PLOT_DEFAULT}); "
                           "needs matplotlib: pip install 'raykafka[bench]'")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .demo import plot_rates, quiet_stderr, run_demo

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
        plot = plot_rates(report.timeline, Path(args.plot)) if args.plot is not None else None
    print(f"summary  {report.rows:,} events written at {report.rows / report.write_seconds:,.0f} rows/s and read "
          f"at {report.consumed / report.read_seconds:,.0f} rows/s, every count checked"
          + (f"; rates plotted in {plot}" if plot else "") + (f"; Ray and Spark logged to {log_path}" if log_path else ""),
          flush=True)
    return 0
