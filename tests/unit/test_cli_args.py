"""`raykafka` argument parsing: options anywhere on the line, for every command (no broker)."""

from __future__ import annotations

import pytest

from raykafka.app.cli import _all_parsers, _commands, build_parser, main, parse_args


def parsed(argv: list[str]) -> dict:
    args = vars(parse_args(argv))
    args.pop("func")
    return args


# each command as a list of tokens groups: the command word, its positionals, its options (with values)
LINES = {
    "topic create": (["topic"], ["create", "events"], [["-b", "h:1"], ["-p", "6"], ["-r", "1"], ["--if-not-exists"],
                                                       ["-X", "client.id=x"]]),
    "topic delete": (["topic"], ["delete", "events", "more"], [["-b", "h:1"], ["--if-exists"]]),
    "topic list": (["topic"], ["list"], [["-b", "h:1"], ["-X", "client.id=x"]]),
    "topic alter-config": (["topic"], ["alter-config", "events"], [["-b", "h:1"], ["-c", "retention.ms=1"],
                                                                   ["--delete", "cleanup.policy"]]),
    "topic delete-records": (["topic"], ["delete-records", "events"], [["-b", "h:1"], ["--before", "5"],
                                                                       ["-p", "2"]]),
    "produce": (["produce"], ["in.txt", "-"], [["-b", "h:1"], ["-t", "events"], ["-K", ":"], ["-p", "2"],
                                               ["-X", "linger.ms=1"]]),
    "consume": (["consume"], [], [["-b", "h:1"], ["-t", "events"], ["-g", "g1"], ["-o", "-5"], ["-c", "3"], ["-e"],
                                  ["-f", "%t %p %o %k %s\\n"], ["-X", "value.deserializer=json"]]),
    "metadata": (["metadata"], [], [["-b", "h:1"], ["-t", "events"], ["-f", "json"],
                                    ["-X", "client.id=x"]]),
    "group list": (["group"], ["list"], [["-b", "h:1"], ["-f", "json"]]),
    "group describe": (["group"], ["describe", "g1", "g2"], [["-b", "h:1"], ["-X", "client.id=x"]]),
    "group delete": (["group"], ["delete", "g1"], [["-b", "h:1"], ["--if-exists"]]),
    "group reset-offsets": (["group"], ["reset-offsets", "g1"], [["-b", "h:1"], ["-t", "events:0,2"],
                                                                 ["--to-offset", "-5"], ["--execute"], ["-f", "json"]]),
    "broker": (["broker"], [], [["--port", "9093"], ["--host", "0.0.0.0"]]),
    "demo": (["demo"], [], [["--rows", "10"], ["--partitions", "3"], ["--members", "1"], ["-v"], ["--plot", "x.png"]]),
    "bench": (["bench"], [], [["--quick"], ["--messages", "10"], ["--runs", "1"], ["--out", "x.md"], ["--spark"],
                              ["--clients", "raykafka"]]),
}


@pytest.mark.parametrize("name", sorted(LINES))
def test_options_anywhere_mean_the_same(name):
    command, positionals, options = LINES[name]
    reference = parsed(command + positionals + [t for o in options for t in o])
    words = command + positionals
    for cut in range(len(words) + 1):  # options before, between and after the words, in both orders
        for order in (options, options[::-1]):
            half = len(order) // 2
            first, rest = [t for o in order[:half] for t in o], [t for o in order[half:] for t in o]
            for line in (first + words[:cut] + rest + words[cut:], words[:cut] + first + words[cut:] + rest):
                assert parsed(line) == reference, line


def test_the_issues_line():
    assert parsed(["topic", "create", "-b", "HOST:9092", "events", "-p", "6"]) == parsed(
        ["topic", "create", "events", "-p", "6", "-b", "HOST:9092"])
    args = parsed(["-b", "HOST:9092", "topic", "create", "events", "-p", "6"])
    assert (args["command"], args["action"], args["topics"], args["partitions"]) == ("topic", "create", ["events"], 6)


def test_no_option_takes_a_value_in_one_command_and_none_in_another():
    """The command word is found by skipping options and their values: an option must mean the
    same in every command for that to work."""
    takes: dict[str, set[bool]] = {}
    for sub in _all_parsers(build_parser()):
        for action in sub._actions:
            for option in action.option_strings:
                takes.setdefault(option, set()).add(action.nargs != 0)
    assert {o: v for o, v in takes.items() if len(v) > 1} == {}


def test_errors_name_the_command():
    with pytest.raises(SystemExit):
        parse_args(["topic", "-b", "h:1", "create"])  # no topic name
    with pytest.raises(SystemExit):
        parse_args(["-b", "h:1"])  # no command
    with pytest.raises(SystemExit):
        parse_args(["nonsense", "-b", "h:1"])


def test_a_value_that_looks_like_a_command_is_a_value():
    for line in (["-t", "produce", "consume", "-b", "h:1"], ["consume", "-t", "produce", "-b", "h:1"]):
        args = parsed(line)
        assert (args["command"], args["topic"]) == ("consume", "produce")


def test_reset_offsets_targets():
    for line, named, datetime, offset in (
        (["--to-earliest"], ["earliest"], None, None), (["--to-latest"], ["latest"], None, None),
        (["--to-datetime", "2024-05-01T12:00:00Z"], None, "2024-05-01T12:00:00Z", None),
        (["--to-offset", "42"], None, None, 42),
    ):
        args = parsed(["group", "reset-offsets", "g", "-b", "h:1", "--all-topics", *line])
        assert (args["to_named"], args["to_datetime"], args["to_offset"]) == (named, datetime, offset)
        assert not args["execute"] and not args["dry_run"]  # a dry run unless --execute


def test_every_command_is_covered():
    assert {name.split()[0] for name in LINES} == set(_commands(build_parser()))


def test_each_action_has_its_own_help(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["topic", "create", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: raykafka topic create ")
    assert "--partitions" in text and "--if-not-exists" in text and "--if-exists " not in text
    with pytest.raises(SystemExit):
        main(["group", "-b", "h:1", "delete", "--help"])  # options before the action too
    text = capsys.readouterr().out
    assert text.startswith("usage: raykafka group delete ") and "--to-offset" not in text
    with pytest.raises(SystemExit):
        main(["group", "--help"])  # the command's help lists its actions
    assert "reset-offsets" in capsys.readouterr().out


def test_every_option_has_a_help_line_showing_its_default():
    import argparse

    missing, undefaulted = [], []
    for parser in _all_parsers(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if not action.help:
                missing.append(f"{parser.prog} {action.option_strings[0]}")
            elif action.default not in (None, False) and f"(default: {action.default})" not in text:
                undefaulted.append(f"{parser.prog} {action.option_strings[0]}")
    assert missing == [] and undefaulted == []


@pytest.mark.parametrize(("line", "says"), [
    (["topic", "alter-config", "events", "-b", "h:1"], "needs -c key=value or --delete KEY"),
    (["topic", "alter-config", "a", "b", "-b", "h:1", "-c", "k=v"], "takes one topic name, got 2"),
    (["topic", "delete-records", "events", "-b", "h:1"], "--before"),
    (["topic", "delete-records", "-b", "h:1", "--before", "3"], "takes one topic name, got 0"),
    (["topic", "delete-records", "events", "-b", "h:1", "--before", "x"], "invalid int value"),
])
def test_a_topic_config_or_records_line_that_cannot_work_exits_2(capsys, line, says):
    with pytest.raises(SystemExit) as exited:
        main(line)
    assert exited.value.code == 2 and says in capsys.readouterr().err


def test_alter_config_pairs_parse_as_minus_x_does():
    from raykafka.app.args import UsageError
    from raykafka.app.cli import config_pairs

    assert config_pairs(["a=1", "b=x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(UsageError, match="-c takes key=value, got 'novalue'"):
        config_pairs(["novalue"])


def test_version_prints_the_version(capsys):
    from raykafka import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"raykafka {__version__}\n"
