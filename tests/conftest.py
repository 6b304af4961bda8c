"""Shared fixtures: one real tansu broker per test session, on a free loopback port; a tansu
that keeps its log across a restart (S3 storage on a local moto_server); one Ray for the run;
one Spark session for the run, on it; waiting on a condition; a producer's live actors. Tests
marked `slow` run only with `--run-slow` or `RAYKAFKA_SLOW=1` (CI's default run stays short).
Under pytest-xdist each parallel worker is a session of its own (tests/scheduling.py says which
tests it takes)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raykafka.driver.embedded_broker import EmbeddedBroker, free_port

from .cpu_time import (
    CPU_PROPERTY,
    CPUS_PROPERTY,
    PARALLEL_PROPERTY,
    PROCESS_PROPERTY,
    ProcessCpu,
    busy_seconds,
    cores,
    totals_json,
)
from .processes import PROPERTY, WorkerCount
from .scheduling import RECORD, SLOW_RECORD, longest_first, make_scheduler, recorded_seconds
from .tiers import slow_tier


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config: pytest.Config) -> None:
    parallel_worker = os.environ.get("PYTEST_XDIST_WORKER")
    if parallel_worker:
        # each parallel worker's Ray sessions (its own, its CLI subprocesses') in a directory of
        # its own, so that each counts the Ray processes its own tests started
        own = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / f"raykafka-{parallel_worker}"
        own.mkdir(parents=True, exist_ok=True)
        os.environ["RAY_TMPDIR"] = str(own)
    config.stash[_WORKER_COUNT] = WorkerCount()  # Ray's sessions from before the run are not counted
    config.stash[_CPU_AT_START] = busy_seconds()
    if busy_seconds() is not None:  # a Linux /proc: whose the CPU was, by kind of process
        config.stash[_PROCESS_CPU] = ProcessCpu()
        config.stash[_PROCESS_CPU].start()
    if config.getoption("--run-slow"):
        os.environ["RAYKAFKA_SLOW"] = "1"  # read as the test modules are collected (tests/tiers.py)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a parallel worker: the units longest first (tests/scheduling.py)
        items[:] = longest_first(items, recorded_seconds(SLOW_RECORD if slow_tier() else RECORD))
    for item in items:  # a hypothesis test runs in both tiers, with more examples in the slow one
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.fuzz)
    if slow_tier():
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or RAYKAFKA_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadfile` (the addopts'): a module's tests in one parallel worker, tests/spark's
    in one, longest first (tests/scheduling.py); another `--dist` keeps xdist's own."""
    return make_scheduler(config, log) if config.getoption("dist") == "loadfile" else None


_WORKER_COUNT = pytest.StashKey[WorkerCount]()
_CPU_AT_START = pytest.StashKey[float | None]()
_PROCESS_CPU = pytest.StashKey[ProcessCpu]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's CPU, and whose it was (tests/cpu_time.py), into the JUnit XML's suite properties when one is
    written: the session's fixtures (Ray, the broker, Spark) are down by now, and the XML not
    yet written."""
    from _pytest.junitxml import xml_key

    xml = session.config.stash.get(xml_key, None)
    started, now = session.config.stash.get(_CPU_AT_START, None), busy_seconds()
    by_process = session.config.stash.get(_PROCESS_CPU, None)
    totals = by_process.stop() if by_process is not None else None
    if xml is not None:
        xml.add_global_property(PARALLEL_PROPERTY, str(getattr(session.config.option, "numprocesses", None) or 1))
    if xml is not None and started is not None and now is not None:
        xml.add_global_property(CPU_PROPERTY, f"{now - started:.1f}")
        xml.add_global_property(CPUS_PROPERTY, str(cores()))
        if totals:
            xml.add_global_property(PROCESS_PROPERTY, totals_json(totals))


_WORKERS_AT_SETUP = pytest.StashKey[int]()
_CPU_AT_SETUP = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_WORKERS_AT_SETUP] = item.config.stash[_WORKER_COUNT].started()
    if _PROCESS_CPU in item.config.stash:
        item.stash[_CPU_AT_SETUP] = item.config.stash[_PROCESS_CPU].sampled


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    """The Ray worker processes a test started (tests/processes.py) and the CPU of this pytest
    process's tree meanwhile (tests/cpu_time.py), on its teardown's report, where the JUnit XML
    takes a test's properties from."""
    report = yield
    at_setup = item.stash.get(_WORKERS_AT_SETUP, None)
    if call.when == "teardown" and at_setup is not None:
        report.user_properties.append((PROPERTY, item.config.stash[_WORKER_COUNT].started() - at_setup))
        cpu_at_setup = item.stash.get(_CPU_AT_SETUP, None)
        if cpu_at_setup is not None:
            report.user_properties.append((CPU_PROPERTY, f"{item.config.stash[_PROCESS_CPU].sampled - cpu_at_setup:.2f}"))
    return report


# session.timeout.ms for a consumer group on tansu, in a test that does not wait for a member to
# be timed out nor measures a session: tansu answers a JoinGroup only after half the member's
# session.timeout.ms, so every join round costs half of it (1.5 s; cooperative rebalances take
# two rounds). Its heartbeat.interval.ms stays at most 500.
TANSU_GROUP_SESSION_MS = 3000


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap


@pytest.fixture()
def topic_name() -> Callable[[str], str]:
    """Unique topic names, so tests sharing the session's broker never see each other's data."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


# the run's one Ray, started on first use: (gcs address) when this file started it, else None
_SHARED_RAY: dict[str, str | None] = {"address": None}


def start_shared_ray(replace_foreign: bool = False) -> None:
    """Start the test run's one Ray unless Ray is up: a local Ray of 2 CPUs (the machine's), with
    the JVM options Spark-on-Ray needs, so that the Spark tests share it rather than start their
    own. With `replace_foreign`, a Ray that is not the run's one (a bare `Producer` started one
    with Ray's defaults) is shut down first. With RAYKAFKA_ACTOR_LOGS=1 the actors log at INFO
    and their lines come to this process's stderr (run pytest with -s), to see what a pipeline
    did under a fault."""
    import ray

    from raykafka.spark_bridge.session import JVM_OPTIONS

    if ray.is_initialized():
        if not replace_foreign or ray.get_runtime_context().gcs_address == _SHARED_RAY["address"]:
            return
        stop_ray()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    logs = os.environ.get("RAYKAFKA_ACTOR_LOGS", "") not in ("", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=logs,
             logging_config=ray.LoggingConfig(log_level="INFO") if logs else None,
             job_config=ray.job_config.JobConfig(jvm_options=JVM_OPTIONS))
    _SHARED_RAY["address"] = ray.get_runtime_context().gcs_address


def stop_ray() -> None:
    """Shut down whatever Ray this process runs, the cached producers and writer pools and a
    Spark session first (while Ray is up, so their actors stop cleanly): for a module that needs a Ray of its own
    (the multi-node cluster, the metrics port, the bench suite), and at the end of the run."""
    import ray

    if not ray.is_initialized():
        return
    from raykafka.spark_bridge.node_writers import POOLS
    from raykafka.spark_bridge.producer_cache import PRODUCERS

    POOLS.close_all()
    PRODUCERS.close_all()
    if "raydp" in sys.modules:  # a Spark session runs on this Ray: it goes with it
        from raykafka.spark_bridge.session import stop_spark

        stop_spark()
        _SHARED_SPARK["session"] = None
    ray.shutdown()


# the run's one Spark session (RayDP), on the run's one Ray: None until a test asks for it, and
# again once `stop_ray` stopped it with its Ray
_SHARED_SPARK: dict[str, Any] = {"session": None}


def shared_spark() -> Any:
    """The run's one Spark session: started on first use, on the Ray running (the run's one, which
    the fixtures start first), and again after a module that needed a Ray of its own stopped it.
    A process holds one RayDP session at a time; the tests share it."""
    from raykafka.spark_bridge.session import init_spark

    if _SHARED_SPARK["session"] is None:
        _SHARED_SPARK["session"] = init_spark("raykafka-tests")
    return _SHARED_SPARK["session"]


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[Callable[..., None]]:
    """start_shared_ray, for the fixtures that need Ray; the run's Ray is shut down at the end."""
    yield start_shared_ray
    stop_ray()


@pytest.fixture(scope="session")
def spark_runtime(ray_runtime: Callable[..., None]) -> Callable[[], Any]:
    """shared_spark, for the fixtures that need Spark, once they have the run's Ray (the `spark`
    fixture asks for it first); it stops with the run's Ray (`stop_ray`)."""
    return shared_spark


@pytest.fixture(scope="session")
def ray_stopper() -> Callable[[], None]:
    """stop_ray, for a module that needs no Ray running or a Ray of its own."""
    return stop_ray


@pytest.fixture(scope="module")
def ray_session(ray_runtime: Callable[..., None]) -> Iterator[None]:
    """Ray for a test module: the run's one Ray, started on first use (and again after a module
    that needed a Ray of its own and shut it down: the multi-node cluster, the metrics port).
    It is not shut down between modules: starting Ray costs seconds, and a module's actors are
    gone by its end (each test closes what it built)."""
    ray_runtime()
    yield


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def _live_actors(prefix: str) -> list[str]:
    """Names of this producer's actors that are still alive, from the GCS actor table.

    (`ray.util.state.list_actors` needs the dashboard, which `ray[data]` does not install; the
    GCS table is what it reads.)"""
    import ray
    import ray._private.state

    named = [n for n in ray.util.list_named_actors() if n.startswith(prefix)]
    table = [a["Name"] for a in ray._private.state.actors().values()
             if a["Name"].startswith(prefix) and a["State"] != "DEAD"]
    return sorted(set(named) | set(table))


def _kill_actor(name: str, timeout: float = 30.0) -> str:
    """ray.kill the named actor (no restart) and return once the GCS actor table says it is dead.

    `ray.kill` only asks: calls sent right after it can still run on the actor. A test that
    means "the next sends meet a dead actor" awaits the death first."""
    import ray
    import ray._private.state

    handle = ray.get_actor(name)
    actor_id = handle._actor_id.hex()
    ray.kill(handle, no_restart=True)
    _wait_for(lambda: ray._private.state.actors(actor_id).get("State") == "DEAD", timeout)
    return name


@pytest.fixture(scope="session")
def kill_actor() -> Callable[..., str]:
    """kill_actor(name): ray.kill it and wait until it is dead; its name."""
    return _kill_actor


CONSUMER_ACTORS = ("GroupMember", "PartitionConsumer", "BrokerConsumer")


def _live_actors_of(classes: tuple[str, ...] = CONSUMER_ACTORS) -> list[str]:
    """Class names of the actors of these classes that are not dead (by default the consumers')."""
    import ray._private.state

    return sorted(a["ActorClassName"] for a in ray._private.state.actors().values()
                  if a.get("ActorClassName") in classes and a["State"] != "DEAD")


@pytest.fixture()
def live_actors_of() -> Callable[..., list[str]]:
    """live_actors_of(classes=the consumer actors): class names of the live actors of those classes."""
    return _live_actors_of


@pytest.fixture()
def wait_for() -> Callable[..., None]:
    """wait_for(predicate, timeout=30): poll until true, else fail the test."""
    return _wait_for


@pytest.fixture()
def live_actors() -> Callable[[str], list[str]]:
    """live_actors(prefix): names of the actors with that prefix that are not dead."""
    return _live_actors


def _wait_listening(host: str, port: int, what: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before listening on {host}:{port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not listen on {host}:{port} within {timeout}s") from None
            time.sleep(0.05)  # polling a port: there is no event to wait on


class S3Storage:
    """A local S3 API (moto_server from `moto[server]`) holding the bucket `tansu`."""

    BUCKET = "tansu"

    def __init__(self, log_path: Path):
        self.port = free_port()
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self) -> S3Storage:
        import boto3

        server = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
        if server is None:
            raise RuntimeError("moto_server not found: install the test extra (moto[server])")
        self.process = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                        stdin=subprocess.DEVNULL)
        _wait_listening("127.0.0.1", self.port, "moto_server", self.process)
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="x", aws_secret_access_key="y",
                     region_name="us-east-1").create_bucket(Bucket=self.BUCKET)
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class RestartableBroker(EmbeddedBroker):
    """tansu on S3 storage: `kill()` it (SIGKILL, as a crash) and `start()` it again on the same
    port, and it serves the log, the committed offsets and the groups it had, as a real broker
    does. (With memory storage a restarted tansu is empty.)"""

    def __init__(self, storage: S3Storage, **kw):
        super().__init__(**kw)
        self.storage = storage
        self.starts = 0

    def command(self) -> list[str]:
        command = super().command()
        command[command.index("--storage-engine") + 1] = f"s3://{self.storage.BUCKET}/"
        # `env` runs tansu with the storage's variables (and execs it: signals reach tansu itself)
        return ["env", *(f"{k}={v}" for k, v in self.storage.env().items()), *command]

    def start(self, timeout: float = 30.0) -> RestartableBroker:
        super().start(timeout)
        self.starts += 1
        return self

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture()
def restartable_broker(tmp_path: Path) -> Iterator[Callable[..., RestartableBroker]]:
    """restartable_broker(**EmbeddedBroker options): a started tansu on S3 storage of its own;
    stopped, with its storage, when the test ends."""
    made: list[tuple[RestartableBroker, S3Storage]] = []

    def make(**kw) -> RestartableBroker:
        storage = S3Storage(tmp_path / f"moto-{len(made)}.log").start()
        broker = RestartableBroker(storage, log_path=tmp_path / f"tansu-{len(made)}.log", **kw)
        made.append((broker, storage))
        return broker.start()

    yield make
    for broker, storage in made:
        broker.stop()
        storage.stop()
