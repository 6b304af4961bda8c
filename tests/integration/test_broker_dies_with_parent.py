"""tansu dies with the process that started it: a process that started an `EmbeddedBroker` and
exits without `stop()` (with prctl's parent-death signal, and without it, as where prctl is
absent), is sent SIGTERM, or is killed outright (SIGKILL) leaves no tansu behind, and neither
does `raykafka broker` sent SIGTERM or killed. Each starter is a subprocess of its
own; tansu's pid comes from the EmbeddedBroker object (printed) or from /proc (the CLI's child).
No Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raykafka.driver.embedded_broker import free_port

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

GONE_WITHIN = 5.0  # s: "a few seconds" after its parent ended, tansu must be gone
STARTED_WITHIN = 30.0  # s for a starter to have tansu listening

STARTER = """
import sys, time
from raykafka.driver import embedded_broker
from raykafka.driver.embedded_broker import EmbeddedBroker
if sys.argv[1] == "exit-without-prctl":  # as where prctl is absent: the atexit stop alone
    embedded_broker._parent_death_hook = lambda: None
broker = EmbeddedBroker().start()
print(broker.process.pid, flush=True)
if sys.argv[1].startswith("exit"):
    sys.stdin.readline()  # until the test has seen tansu running: the exit below ends it at once
    sys.exit(0)  # without stop()
time.sleep(600)  # until the test's signal
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live tansu (not gone, not a zombie waiting for its reaper, not reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat[stat.rindex(")") + 2]
    return state != "Z" and b"tansu" in cmdline


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def leave_nothing(starter: subprocess.Popen, tansu: int | None) -> None:
    """After a test, whatever it found: its starter and its tansu ended, each by its own pid."""
    if starter.poll() is None:
        starter.kill()
        starter.wait()
    if tansu is not None and running(tansu):
        os.kill(tansu, signal.SIGKILL)


def end(starter: subprocess.Popen, how: str) -> None:
    if how.startswith("exit"):
        starter.stdin.close()  # the starter's go-ahead to exit
        starter.wait(STARTED_WITHIN)
    else:
        starter.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        starter.wait(STARTED_WITHIN)


@pytest.mark.parametrize("how", ["exit", "exit-without-prctl", "sigterm", "sigkill"])
def test_an_embedded_broker_dies_with_its_process(how):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    tansu = None
    try:
        tansu = int(starter.stdout.readline())
        assert running(tansu)
        end(starter, how)
        assert gone_within(tansu, GONE_WITHIN), f"tansu {tansu} outlived its process ({how})"
    finally:
        leave_nothing(starter, tansu)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_the_cli_broker_dies_with_its_process(how):
    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    port = free_port()
    cli = subprocess.Popen([*command, "broker", "--port", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    tansu = None
    try:
        deadline = time.monotonic() + STARTED_WITHIN
        while not (found := [p for p in children(cli.pid) if running(p)]):
            assert time.monotonic() < deadline and cli.poll() is None, "raykafka broker started no tansu"
            time.sleep(0.05)
        (tansu,) = found
        end(cli, how)
        assert gone_within(tansu, GONE_WITHIN), f"tansu {tansu} outlived raykafka broker ({how})"
        if how == "sigterm":
            assert cli.returncode == 0  # stopped on request, as by Ctrl-C
    finally:
        leave_nothing(cli, tansu)
