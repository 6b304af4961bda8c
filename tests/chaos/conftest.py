"""Chaos suite helpers: Ray once per module, the short/long switch, a records writer, and the
accounting every chaos test applies to what it sent.

Short form by default (CI); `--chaos-full` or `RAYKAFKA_CHAOS_FULL=1` for the long form. Each
test that passes writes one JSON record to `tests/chaos/records/` (committed: RELIABILITY.md's
figures are read from there), saying its form, when it ran and on which commit; a test that runs
removes its old record first, so one that fails leaves none. The whole of RELIABILITY.md, from a
clean checkout:

    python tests/chaos/report.py --run --full

runs `python -m pytest tests/chaos --chaos-full --run-slow` into an emptied records folder and
renders them (`python tests/chaos/report.py` alone renders the records present).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

# The suite's own modules (`proxy`, `outage`, `report`) import by name from the tests beside them.
sys.path.insert(0, str(Path(__file__).parent))

import report  # noqa: E402 - beside this file, on the path just set

RECORDS = report.RECORDS
# the short form's records go here, not committed: a quick run never replaces a full-form record
SHORT_RECORDS = RECORDS.parent / "records-short"


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--chaos-full", action="store_true", default=False,
                         help="run the chaos suite's long form (100,000 messages per scenario)")
    except ValueError:  # already added
        pass


def is_full(config: pytest.Config) -> bool:
    """Whether this run is the chaos suite's long form (`--chaos-full` or RAYKAFKA_CHAOS_FULL=1)."""
    try:
        flag = bool(config.getoption("--chaos-full"))
    except ValueError:  # this conftest was not an initial one: only the env var works
        flag = False
    return flag or os.environ.get("RAYKAFKA_CHAOS_FULL", "") not in ("", "0")


@pytest.fixture(scope="session")
def chaos_full(request: pytest.FixtureRequest) -> bool:
    return is_full(request.config)


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """Ray for one module. With RAYKAFKA_ACTOR_LOGS=1 the actors log at INFO and their lines come
    to this process's stderr (run pytest with -s), to see what a pipeline did under a fault."""
    import ray

    started = not ray.is_initialized()
    if started:
        logs = os.environ.get("RAYKAFKA_ACTOR_LOGS", "") not in ("", "0")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=logs, configure_logging=False,
                 logging_config=ray.LoggingConfig(log_level="INFO") if logs else None)
    yield
    if started:
        ray.shutdown()


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def cause_of(error: BaseException) -> str:
    """A short name for why a message failed: the class, and the broker error's name if any."""
    name = type(error).__name__
    code = getattr(error, "code", None)
    if code is not None:
        from raykafka.wire.errors import code_for

        name += f"/{code_for(code).name}"
    text = str(error)
    if "ActorDiedError" in text or "died" in text:
        name += "/actor-died"
    return name


class Ledger:
    """What one test sent and how each message ended; the figures a chaos record holds."""

    def __init__(self) -> None:
        self.values: list[bytes] = []  # by send index; values are unique
        self.futures: list = []
        self.callbacks = 0
        self.started = time.monotonic()

    def on_delivery(self, meta, error) -> None:  # called once per message by the producer
        self.callbacks += 1

    def send(self, producer, topic: str, value: bytes, key: bytes | None = None, **kw) -> None:
        self.values.append(value)
        self.futures.append(producer.send(topic, value, key=key, **kw))

    def settle(self, timeout: float) -> dict:
        """Wait for every future (each within `timeout` of now); split delivered and failed."""
        deadline = time.monotonic() + timeout
        delivered: dict[int, tuple[int, int]] = {}  # send index -> (partition, offset)
        failed: dict[int, BaseException] = {}
        unresolved = 0
        for i, f in enumerate(self.futures):
            left = max(0.0, deadline - time.monotonic())
            try:
                meta = f.result(left)
                delivered[i] = (meta.partition, meta.offset)
            except TimeoutError:
                unresolved += 1
            except Exception as exc:  # noqa: BLE001 - every cause is counted
                failed[i] = exc
        self.delivered, self.failed, self.unresolved = delivered, failed, unresolved
        return {"sent": len(self.futures), "delivered": len(delivered), "failed": len(failed),
                "unresolved": unresolved,
                "failed_by_cause": dict(Counter(cause_of(e) for e in failed.values()))}

    def check_log(self, log: dict[int, list[tuple[int, bytes]]], *, acks: int = -1,
                  only: range | None = None) -> dict:
        """Compare with what the broker holds: partition -> [(offset, value)] in log order.

        lost: delivered but not at its reported offset (or not at all); a success reported
        without an offset (-1) counts as lost unless `acks=0`, where no offset is given and the
        message need only be in the log (`without_offset` says how many were so reported).
        duplicated: a value in the log more than once; reordered: within a partition, a message
        first logged after one sent later (duplicate copies not counted); failed_but_written:
        failed but in the log (a failed message's fate may be unknown). `only`: the send
        indexes to judge (the others' values are ignored wherever they are)."""
        wanted = range(len(self.values)) if only is None else only
        index = {self.values[i]: i for i in wanted}
        at: dict[tuple[int, int], bytes] = {}
        seen: Counter = Counter()
        reordered = 0
        for partition, entries in log.items():
            last = -1
            for offset, value in entries:
                at[(partition, offset)] = value
                i = index.get(value)
                if i is None:
                    continue
                seen[value] += 1
                if seen[value] > 1:
                    continue  # a duplicate copy: counted as duplicated, not as reordered
                if i < last:
                    reordered += 1
                last = max(last, i)
        lost = without_offset = 0
        for i, where in self.delivered.items():
            if i not in wanted:
                continue
            if where[1] >= 0:
                lost += at.get(where) != self.values[i]
            elif acks == 0:
                lost += not seen[self.values[i]]
            else:  # a success with no offset to check: the accounting failed, whatever the log says
                without_offset += 1
                lost += 1
        duplicated = sum(n - 1 for n in seen.values() if n > 1)
        failed_but_written = sum(1 for i in self.failed if i in wanted and seen[self.values[i]])
        return {"lost": lost, "duplicated": duplicated, "reordered": reordered,
                "failed_but_written": failed_but_written, "without_offset": without_offset}


@pytest.fixture()
def ledger() -> Ledger:
    return Ledger()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the item (`item.chaos_reports["call"]`): a record is written
    only when its test's call passed."""
    rep = yield
    item.__dict__.setdefault("chaos_reports", {})[rep.when] = rep
    return rep


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test about to run (not skipped) loses its old record: if it fails, none is left."""
    if "record" in getattr(item, "fixturenames", ()):
        record_path(item).unlink(missing_ok=True)


def record_path(item: pytest.Item) -> Path:
    """Where the test's record goes: `RECORDS` in the long form, `SHORT_RECORDS` in the short."""
    folder = RECORDS if is_full(item.config) else SHORT_RECORDS
    return folder / f"{item.module.__name__.rsplit('.', 1)[-1]}.{item.name}.json"


@functools.cache
def run_commit() -> str:
    """The commit this run tests, `-dirty` if the tree differs from it (the records aside)."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--", ".", f":!{RECORDS.relative_to(root)}",
                      f":!{SHORT_RECORDS.relative_to(root)}")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changed else "")


@pytest.fixture()
def record(request: pytest.FixtureRequest, chaos_full: bool) -> Iterator[Callable[..., None]]:
    """record(**figures): this test's figures, written to `RECORDS` as JSON at teardown if the
    test passed (a later call adds to or replaces the figures of an earlier one)."""
    figures: dict = {}
    run_commit()  # before this test writes anything
    yield figures.update
    call = request.node.__dict__.get("chaos_reports", {}).get("call")
    if not figures or call is None or not call.passed:
        return
    node = request.node
    out = {"test": node.name, "function": node.originalname, "module": node.module.__name__.rsplit(".", 1)[-1],
           "form": "full" if chaos_full else "short", "doc": (node.function.__doc__ or "").strip(),
           "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": run_commit(), **figures}
    path = record_path(node)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, sort_keys=True, default=str) + "\n")


@pytest.fixture(scope="session")
def kit(kill_actor):
    """The helpers above for test modules (importlib mode cannot import conftest by name), and
    `FaultProxy` from proxy.py beside this file."""
    import proxy

    return SimpleNamespace(wait_for=wait_for, cause_of=cause_of, read_back=read_back, create_topic=create_topic,
                           kill_by_role=functools.partial(kill_by_role, kill=kill_actor), heal_figures=heal_figures, rows=rows,
                           consumed_figures=consumed_figures,
                           FaultProxy=proxy.FaultProxy)


def rows(batch) -> list[tuple[int, bytes]]:
    """(partition, value) of each record of a consumed batch, in order."""
    return list(zip(batch.column("partition").to_pylist(), batch.column("value").to_pylist(), strict=True))


def consumed_figures(read: list[tuple[int, bytes]], expected: list[bytes]) -> dict:
    """lost, duplicated and reordered, measured on what a consumer handed out: `expected` values
    (in the order they were sent) not read; values read more than once; within a partition, a
    value read after one sent later."""
    order = {v: i for i, v in enumerate(expected)}
    seen: set[bytes] = set()
    last: dict[int, int] = {}
    duplicated = reordered = 0
    for partition, value in read:
        if value in seen:
            duplicated += 1
            continue
        seen.add(value)
        i = order.get(value, -1)
        if i < last.get(partition, -1):
            reordered += 1
        last[partition] = max(i, last.get(partition, -1))
    return {"lost": sum(1 for v in expected if v not in seen), "duplicated": duplicated, "reordered": reordered}


def read_back(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0,
              idle: float = 2.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of `topic` with confluent-kafka, partition -> [(offset, value)] in log order:
    until `expected` records came and then `idle` s passed with no more (to see duplicates)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        got, last = 0, time.monotonic()
        while time.monotonic() < deadline:
            msgs = consumer.consume(10000, 0.2)
            for m in msgs:
                if m.error() is None:
                    out[m.partition()].append((m.offset(), m.value()))
                    got += 1
            if msgs:
                last = time.monotonic()
            elif got >= expected and time.monotonic() - last > idle:
                break
    finally:
        consumer.close()
    return out


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from raykafka.driver.admin import Admin

    with Admin(bootstrap) as admin:
        admin.create_topics({name: partitions})


def heal_figures(producer) -> list[dict]:
    """Each heal of `producer` as a record shows it: seconds, found in the log, sent again."""
    return [{"seconds": round(h.seconds, 2), "found_in_log": h.found_in_log, "sent_again": h.sent_again}
            for h in producer.heals_done]


def kill_by_role(prefix: str, role: str, kill: Callable[[str], str]) -> str:
    """Kill one live actor of this producer whose role starts with `role` (`kill` returns once
    it is dead); its name."""
    import ray

    names = sorted(n for n in ray.util.list_named_actors() if n.startswith(prefix + role))
    assert names, f"no live {role} actor with prefix {prefix}"
    return kill(names[0])
