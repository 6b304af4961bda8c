"""What every `raykafka` command shares: the exit statuses, the usage error, and a client config
from `-b` and `-X`. Imported by cli.py and each cli_<command>.py; imports nothing of ours."""

from __future__ import annotations

import argparse
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1  # Kafka or the network said no
EXIT_USAGE = 2  # as argparse exits on a bad command line
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


class UsageError(ValueError):
    """A command line that cannot work, found after parsing (exit status EXIT_USAGE)."""


def properties(pairs: list[str] | None) -> dict[str, str]:
    """`-X key=value` pairs as a config dict, the last of a key winning (as kcat's)."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-X takes key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def client_config(args: argparse.Namespace, **defaults: Any) -> dict[str, Any]:
    """The client config of a command: `-b` as bootstrap.servers, over `defaults`, under `-X`."""
    return {"bootstrap.servers": args.brokers, **defaults, **properties(args.X)}
