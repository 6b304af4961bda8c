"""`raykafka topic` as a user types it, flags first or last (kafka-topics and kcat habits): the
installed entry point in a subprocess, against tansu."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.broker]


def raykafka(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def listed(bootstrap: str) -> dict[str, int]:
    r = raykafka("topic", "-b", bootstrap, "list")
    assert r.returncode == 0, r.stderr
    return {name: int(n) for name, n in (line.split("\t") for line in r.stdout.splitlines())}


def test_create_with_flags_before_the_name_list_and_delete(bootstrap, topic_name):
    first, second = topic_name("cli-topic"), topic_name("cli-topic")
    r = raykafka("topic", "create", "-b", bootstrap, first, "-p", "6")
    assert r.returncode == 0, r.stderr
    r = raykafka("-b", bootstrap, "topic", "-p", "2", "create", second)
    assert r.returncode == 0, r.stderr
    topics = listed(bootstrap)
    assert (topics[first], topics[second]) == (6, 2)
    r = raykafka("topic", "delete", first, "-b", bootstrap, second)
    assert r.returncode == 0, r.stderr
    assert not {first, second} & set(listed(bootstrap))


def test_a_missing_name_is_a_usage_error_naming_the_command(bootstrap):
    r = raykafka("topic", "-b", bootstrap, "create", "-p", "3")
    assert r.returncode == 2
    assert "topic create needs at least one topic name" in r.stderr
