"""The unit tier's rules: no test here starts Ray (one that asks for it fails collection, and
`ray.init` raises if one reaches it anyway), and a per-call bound for decoders fed hostile
bytes: a hang fails its test, it does not hang the run."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import ray

UNIT = Path(__file__).resolve().parent
# the fixtures that start or stop the run's Ray (tests/conftest.py and the multi-node fixture)
RAY_FIXTURES = frozenset({"ray_session", "ray_runtime", "ray_stopper", "metrics_port", "multinode", "ray_for_spark", "spark_runtime"})


class UnitTestStartedRay(AssertionError):
    """A unit test reached `ray.init`: it belongs in a tier that starts Ray."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test under tests/unit/ marked `ray`, or asking for a Ray fixture, fails collection."""
    wrong = [item.nodeid for item in items if Path(str(item.path)).resolve().is_relative_to(UNIT)
             and (item.get_closest_marker("ray") is not None or RAY_FIXTURES & set(item.fixturenames))]
    if wrong:
        raise pytest.UsageError(f"tests/unit/ runs without Ray; these ask for it: {', '.join(wrong)}")


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray.init` raises in a unit test (an import of raykafka's actors is fine; starting Ray is not)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise UnitTestStartedRay("a unit test called ray.init: move it to a tier that starts Ray")

    monkeypatch.setattr(ray, "init", refuse)


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
