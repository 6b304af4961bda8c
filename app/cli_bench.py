"""`raykafka bench`: the benchmark suite (app/bench/suite.py) on its own tansu; writes BENCHMARKS.md.

    raykafka bench [--quick] [--messages N] [--runs 3] [--out BENCHMARKS.md] [--spark] [--against REF]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="measure raykafka against other clients on an embedded tansu")
    p.add_argument("--quick", action="store_true", help="a small run (100-byte values, no compression), ~2 minutes")
    p.add_argument("--messages", type=int, help="messages per run (default 100000, --quick 5000)")
    p.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    p.add_argument("--out", default="BENCHMARKS.md", help="the Markdown report; the chart goes next to it (.png)")
    p.add_argument("--pipelines", type=int, default=2, help="parallel producer pipelines / group members")
    p.add_argument("--spark", action="store_true", help="also measure the Spark DataFrame path (starts Spark, ~20 s)")
    p.add_argument("--against", metavar="GIT_REF",
                   help="also time the hot paths of this git revision beside the current code")
    p.add_argument("--sizes", help="value sizes in bytes, comma-separated (default 100,1024)")
    p.add_argument("--codecs", help="compression codecs, comma-separated (default none,lz4)")
    p.add_argument("--clients", help="only the clients whose label starts with one of these, comma-separated")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .bench.report import NO_CHART, bound_results, render_chart, render_markdown, target_results
    from .bench.suite import Settings, run_suite

    if args.runs < 1:
        raise ValueError(f"--runs: at least 1, got {args.runs}")
    s = Settings.quick() if args.quick else Settings()
    if args.messages is not None:
        if args.messages < 1:
            raise ValueError(f"--messages: at least 1, got {args.messages}")
        s.messages = args.messages
    s.runs, s.pipelines, s.spark, s.against = args.runs, args.pipelines, args.spark, args.against
    if args.sizes:
        s.sizes = tuple(int(v) for v in args.sizes.split(","))
    if args.codecs:
        s.codecs = tuple(c.strip() for c in args.codecs.split(",") if c.strip())
    if args.clients:
        s.clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    command = "raykafka " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["bench"] \
        else "raykafka bench"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    report = run_suite(s, command)
    chart_path = os.path.splitext(args.out)[0] + ".png"
    chart, note = None, ""
    try:
        chart = os.path.basename(chart_path) if render_chart(report, chart_path) else None
    except ImportError:
        note = NO_CHART
    with open(args.out, "w") as f:
        f.write(render_markdown(report, chart, note))
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:  # every run's figure, to compare or re-render
        json.dump(dataclasses.asdict(report), f, indent=1, default=str)
    print(f"wrote {args.out}" + (f" and {chart_path}" if chart else f" ({note})" if note else ""), file=sys.stderr)
    verdicts = {None: "n/a", "yes": "met", "no": "MISSED", "straddles": "STRADDLES"}
    for text, ratio, _need, met, _spread in target_results(report):
        print(f"  {text}: {'—' if ratio is None else f'{ratio:.2f}x'} {verdicts[met]}", file=sys.stderr)
    for text, measured, met in bound_results(report):
        print(f"  {text}: {measured} {verdicts[met]}", file=sys.stderr)
    return 0
