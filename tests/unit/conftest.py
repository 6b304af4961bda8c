"""A per-call bound for decoders fed hostile bytes: a hang fails its test, it does not hang the run."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest


class StillRunning(BaseException):
    """Raised in a call that outlived its bound. A BaseException, so no `except Exception` in
    the code under test can take it for an ordinary failure; Hypothesis reports it at once."""


@contextmanager
def _cpu_bound(seconds: float, what: str) -> Iterator[None]:
    """Interrupt the block once the process has spent `seconds` of CPU in it.

    CPU time, not wall time: a decoder that loops for ever spins, and a busy machine does not
    make an honest call look like a hang. SIGPROF, so pytest-timeout's SIGALRM stays the outer
    bound (and the one that ends a hang inside C code, where no signal handler runs)."""

    def interrupt(signum: int, frame: object) -> None:
        raise StillRunning(f"{what}: still running after {seconds}s of CPU")

    previous = signal.signal(signal.SIGPROF, interrupt)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@pytest.fixture(scope="session")
def cpu_bound() -> Callable[[float, str], AbstractContextManager[None]]:
    """cpu_bound(seconds, what): a context manager that fails the test if its block spins longer."""
    return _cpu_bound
