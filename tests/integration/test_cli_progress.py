"""Progress bars of `raykafka produce` (from a file) and `consume -e`: drawn on stderr when it is a
terminal (a pseudo-terminal here), and absent when it is a pipe, while stdout keeps only the
messages. A subprocess against tansu, with Ray."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from raykafka.driver.admin import Admin

pytestmark = [pytest.mark.broker, pytest.mark.ray]


def run(args: list[str], stderr_on_terminal: bool, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of `raykafka ARGS`, stderr on a pseudo-terminal or a pipe.
    It joins this module's Ray (RAY_ADDRESS), whatever other clusters this machine runs."""
    import ray

    script = Path(sys.executable).with_name("raykafka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "raykafka.app.cli"]
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    if not stderr_on_terminal:
        done = subprocess.run([*command, *args], input=stdin, capture_output=True, timeout=300, env=env)
        return done.returncode, done.stdout, done.stderr
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 rows, 100 columns, as a terminal has
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the terminal's last writer is gone
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.Popen([*command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=side, env=env)
    os.close(side)
    try:
        out, _ = proc.communicate(stdin, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(30)
    os.close(main)
    return proc.returncode, out, bytes(seen)


def test_produce_from_a_file_and_consume_to_the_end_draw_bars_only_on_a_terminal(ray_session, bootstrap, topic_name,
                                                                                 tmp_path):
    topic = topic_name("cli-progress")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"".join(b"line %d\n" % i for i in range(5000)))

    status, out, err = run(["produce", "-b", bootstrap, "-t", topic, str(lines)], stderr_on_terminal=True)
    assert status == 0, err.decode(errors="replace")
    assert f"produce {topic}".encode() in err and b"\r" in err  # a bar, redrawn in place
    assert b"5000 delivered, 0 failed of 5000 lines" in err
    status, out, err = run(["produce", "-b", bootstrap, "-t", topic, "-"], stderr_on_terminal=False,
                           stdin=lines.read_bytes())
    assert status == 0, err.decode(errors="replace")
    assert f"produce {topic}".encode() not in err and b"\r" not in err

    status, out, err = run(["consume", "-b", bootstrap, "-t", topic, "-e"], stderr_on_terminal=True)
    assert status == 0, err.decode(errors="replace")
    assert f"consume {topic}".encode() in err and b"msg" in err
    assert sorted(out.splitlines()) == sorted([b"line %d" % i for i in range(5000)] * 2)  # both runs', no bar
    assert b"consume " not in out
    status, out, err = run(["consume", "-b", bootstrap, "-t", topic, "-c", "10"], stderr_on_terminal=False)
    assert status == 0, err.decode(errors="replace")
    assert len(out.splitlines()) == 10 and f"consume {topic}".encode() not in err and b"\r" not in err
