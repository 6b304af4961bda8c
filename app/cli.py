"""The `raykafka` command line, with kcat's and kafka-consumer-groups' habits: options may stand
anywhere on the line, before or after the command word and between its names.

    raykafka broker [--port 9092]
    raykafka topic create|delete|list -b HOST:PORT ...
    raykafka topic alter-config TOPIC -b HOST:PORT [-c key=value]... [--delete KEY]...
    raykafka topic delete-records TOPIC -b HOST:PORT --before OFFSET [-p PARTITION]...
    raykafka metadata -b HOST:PORT [-t TOPIC]... [-f text|json]
    raykafka group list|describe|delete|reset-offsets -b HOST:PORT [GROUP]... ...
    raykafka produce -b HOST:PORT -t TOPIC [-K SEP] [-X key=value]... [FILE]...
    raykafka consume -b HOST:PORT -t TOPIC [-g GROUP] [-o beginning|end|OFFSET] [-c N] [-e] [-f FORMAT]
    raykafka bench ...
    raykafka demo

`topic alter-config` changes only the configs it names (Kafka's IncrementalAlterConfigs: `-c`
sets a key, `--delete` takes it back to its default), as `kafka-configs --alter` does; a broker
that cannot (no IncrementalAlterConfigs) is EXIT_ERROR, naming the call. `topic delete-records`
deletes every record below OFFSET in each partition (all of them unless `-p` names some;
`--before -1`: everything the partition holds), as `kafka-delete-records` does, and prints each
partition's new log start, `TOPIC<TAB>PARTITION<TAB>LOW-WATERMARK`; an offset past a partition's
end is EXIT_ERROR naming the partition and OFFSET_OUT_OF_RANGE. tansu 0.6 lists DeleteRecords
but closes the connection on it: EXIT_ERROR, naming the call.

Exit status (`main`): EXIT_OK when the command did all it was asked; EXIT_ERROR when Kafka or
the network said no (a broker's error code, a timeout, a topic or group that does not exist, a
message not delivered); EXIT_USAGE for a command line or a config that cannot work (argparse's
own errors, an unknown or bad `-X` property); EXIT_INTERRUPTED when Ctrl-C cut a command short.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from .args import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    HelpFormatter,
    UsageError,
    add_client_options,
    client_config,
    counted,
    key_values,
)


def cmd_broker(args: argparse.Namespace) -> int:
    from ..driver.embedded_broker import EmbeddedBroker

    broker = EmbeddedBroker(port=args.port, host=args.host)
    print(f"tansu listening on {broker.bootstrap} (in-memory storage; Ctrl-C or SIGTERM stops it, and it ends "
          "with this process)", file=sys.stderr)
    return broker.run_foreground()


def cmd_topic(args: argparse.Namespace) -> int:
    from ..driver.admin import Admin

    with Admin(client_config(args)) as admin:
        if args.action == "create":
            admin.create_topics(args.topics, num_partitions=args.partitions,
                                replication_factor=args.replication_factor, exist_ok=args.if_not_exists)
            print(f"created {', '.join(args.topics)}", file=sys.stderr)
        elif args.action == "delete":
            admin.delete_topics(args.topics, missing_ok=args.if_exists)
            print(f"deleted {', '.join(args.topics)}", file=sys.stderr)
        elif args.action == "alter-config":
            (topic,) = args.topics
            admin.incremental_alter_configs(topic, set=config_pairs(args.config), delete=args.delete or [])
            print(f"altered configs of {topic}", file=sys.stderr)
        elif args.action == "delete-records":
            (topic,) = args.topics
            partitions = args.partition or [p.partition for p in admin.describe_topics(
                topic, include_configs=False)[topic].partitions]
            low = admin.delete_records({(topic, p): args.before for p in partitions})
            for tp, watermark in low.items():
                print(f"{tp.topic}\t{tp.partition}\t{watermark}")
            print(f"deleted records of {topic} below {args.before} in {counted(len(low), 'partition')}",
                  file=sys.stderr)
        else:
            for name, partitions in admin.list_topics().items():
                print(f"{name}\t{partitions}")
    return 0


def config_pairs(pairs: list[str] | None) -> dict[str, str]:
    """`-c key=value` pairs of `topic alter-config`, the last of a key winning."""
    return key_values(pairs, "-c")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="raykafka", description="A Kafka client for Ray.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    broker = sub.add_parser("broker", help="run the embedded tansu broker in the foreground")
    broker.add_argument("--port", type=int, default=9092, help="the port to listen on")
    broker.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    broker.set_defaults(func=cmd_broker)

    topic = sub.add_parser("topic", help="create, delete or list topics; alter their configs; delete records")
    actions = topic.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create topics")
    create.add_argument("topics", nargs="*", metavar="TOPIC")
    create.add_argument("-p", "--partitions", type=int, default=1, help="partitions of each topic")
    create.add_argument("-r", "--replication-factor", type=int, default=1, help="replicas of each partition")
    create.add_argument("--if-not-exists", action="store_true", help="a topic that exists already is no error")
    delete = actions.add_parser("delete", help="delete topics")
    delete.add_argument("topics", nargs="*", metavar="TOPIC")
    delete.add_argument("--if-exists", action="store_true", help="a topic that does not exist is no error")
    listing = actions.add_parser("list", help="list topics with their partition counts")
    listing.set_defaults(topics=[])
    alter = actions.add_parser("alter-config", help="set or delete some configs of a topic, the others kept")
    alter.add_argument("topics", nargs="*", metavar="TOPIC")
    alter.add_argument("-c", "--config", action="append", metavar="key=value",
                       help="set this config (may be given again)")
    alter.add_argument("--delete", action="append", metavar="KEY",
                       help="delete this config: back to its default (may be given again)")
    records = actions.add_parser("delete-records", help="delete a topic's records below an offset")
    records.add_argument("topics", nargs="*", metavar="TOPIC")
    records.add_argument("--before", type=int, required=True, metavar="OFFSET",
                         help="each partition's new log start (-1: its end, so every record goes)")
    records.add_argument("-p", "--partition", type=int, action="append", metavar="PARTITION",
                         help="a partition (may be given again; default: every partition)")
    for name, action in (("create", create), ("delete", delete), ("list", listing), ("alter-config", alter),
                         ("delete-records", records)):
        add_client_options(action)
        action.set_defaults(func=cmd_topic, action=name)

    _add_more_commands(sub)
    for each in _all_parsers(parser):
        each.formatter_class = HelpFormatter
    return parser


def _add_more_commands(sub: Any) -> None:
    """The commands that live in their own modules, `cli_<command>.py`."""
    import importlib

    for name in ("metadata", "group", "produce", "consume", "bench", "demo"):
        try:
            module = importlib.import_module(f"raykafka.app.cli_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"raykafka.app.cli_{name}":
                raise
            continue
        module.add_parser(sub)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command (and its action, for `topic` and `group`) and its options, the options
    anywhere on the line (before or after the command word, between positionals), as
    kafka-topics and kcat users type them."""
    parser = build_parser()
    taking_value = {option for each in _all_parsers(parser) for action in each._actions if action.nargs != 0
                    for option in action.option_strings}
    commands = _commands(parser)
    command, rest = _split_command(argv, commands, taking_value)
    if command is None:
        return parser.parse_args(argv)  # help, the version, or the error saying which command is missing
    sub = commands[command]
    actions = _subcommands(sub)
    if actions:
        action, rest_of_action = _split_command(rest, actions, taking_value)
        if action is None:
            return sub.parse_args(rest)  # its help, or the error naming the missing or unknown action
        sub, rest = actions[action], rest_of_action
    args = sub.parse_intermixed_args(rest)
    if command == "topic" and args.action in ("create", "delete") and not args.topics:
        sub.error(f"topic {args.action} needs at least one topic name")
    if command == "topic" and args.action in ("alter-config", "delete-records") and len(args.topics) != 1:
        sub.error(f"topic {args.action} takes one topic name, got {len(args.topics)}")
    if command == "topic" and args.action == "alter-config" and not (args.config or args.delete):
        sub.error("topic alter-config needs -c key=value or --delete KEY")
    args.command = command
    return args


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of a parser's subcommands (the commands; a command's actions), or none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    commands = _subcommands(parser)
    if not commands:
        raise AssertionError("the raykafka parser has no commands")
    return commands


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser`, its commands' parsers and their actions' parsers."""
    yield parser
    for sub in _subcommands(parser).values():
        yield from _all_parsers(sub)


def _split_command(argv: list[str], words: dict[str, argparse.ArgumentParser],
                   taking_value: set[str]) -> tuple[str | None, list[str]]:
    """The command (or action) word, the first word that is no option and no option's value,
    and the line without it."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break
        if word.startswith("-") and word != "-":
            i += 2 if word in taking_value else 1
            continue
        return (word, argv[:i] + argv[i + 1:]) if word in words else (None, argv)
    return None, argv


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (see the module's docstring). An error is one line on
    stderr naming its cause; anything unforeseen keeps its traceback."""
    from ..wire.errors import ConfigError, KafkaError

    args = parse_args(sys.argv[1:] if argv is None else list(argv))  # a bad line exits EXIT_USAGE here
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (ConfigError, UsageError) as exc:
        print(f"raykafka: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KafkaError, OSError) as exc:  # the broker or the network said no
        print(f"raykafka: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ValueError as exc:  # a value of the line or of the config that cannot work
        print(f"raykafka: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
