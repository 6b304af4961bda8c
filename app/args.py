"""What every `raykafka` command shares: the exit statuses, the usage error, the help's format,
the `-b` and `-X` options and a client config from them, and counted nouns. Imported by cli.py
and each cli_<command>.py; imports nothing of ours."""

from __future__ import annotations

import argparse
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1  # Kafka or the network said no
EXIT_USAGE = 2  # as argparse exits on a bad command line
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


class UsageError(ValueError):
    """A command line that cannot work, found after parsing (exit status EXIT_USAGE)."""


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help line ends with its default, where it has one (not None, not a flag's
    False): `-p PARTITIONS  partitions of each topic (default: 1)`."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and default is not None and default is not False
                and default != argparse.SUPPRESS and "%(default)" not in text):
            text += " (default: %(default)s)"
        return text


def add_client_options(parser: argparse.ArgumentParser, properties_of: str = "client") -> None:
    """`-b` (bootstrap servers, required) and `-X key=value` (any property), for a command that
    talks to a broker."""
    parser.add_argument("-b", "--brokers", required=True, help="bootstrap servers, host:port[,host:port]")
    parser.add_argument("-X", action="append", metavar="key=value", help=f"{properties_of} property (may be given again)")


def counted(n: int, noun: str) -> str:
    """`1 message`, `0 messages`, `1000 messages`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    """`key=value` pairs given to `option` (`-X`, `-c`) as a dict, the last of a key winning (as
    kcat's); a pair without `=` or a key is a usage error naming the option."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} takes key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def properties(pairs: list[str] | None) -> dict[str, str]:
    """`-X key=value` pairs as a config dict."""
    return key_values(pairs, "-X")


def client_config(args: argparse.Namespace, **defaults: Any) -> dict[str, Any]:
    """The client config of a command: `-b` as bootstrap.servers, over `defaults`, under `-X`."""
    return {"bootstrap.servers": args.brokers, **defaults, **properties(args.X)}
