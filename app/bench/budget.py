"""The process budget's figures (DESIGN.md, "The process budget"), measured by `raykafka bench`
in the same run as the throughput rows: how fast a `Consumer` is ready, whether a producer's new
topics start processes, what a producer's processes hold (PSS, RSS, USS) and spend (CPU a
message) during a 1,000,000-message `send_batch`, and the floor under send→ack latency: a chain
of trivial Ray calls as long as a warm message's path.

Called by: `suite.run_suite`. Calls: raykafka's `Producer` and `Consumer` on the run's broker,
psutil (memory and CPU of the processes), the GCS actor table (which processes are whose), and a
chain of trivial Ray actors.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

ASSIGN_PARTITIONS = 24  # the start-up row: `assign_topic` of a topic this wide
NEW_TOPICS = 12  # the producer's row: one first message to each of this many new topics
SAMPLE_EVERY = 0.02  # seconds between two memory samples
MIB = 2**20
MICROSECONDS = 1e6

# A warm message's actor calls, send to future: the driver hands it to the PartitionDispatcher,
# which hands it to the LeaderDispatcher, which adds it to the broker's BrokerWorker; the
# driver's long poll of that worker's mailbox brings its outcome back.
WARM_PATH = ("driver → PartitionDispatcher", "PartitionDispatcher → LeaderDispatcher",
             "LeaderDispatcher → BrokerWorker", "driver's poll of the BrokerWorker")
WARM_PATH_CALLS = len(WARM_PATH)

CONSUMER_CLASSES = ("PartitionConsumer", "BrokerConsumer")

ASSIGN_ROW = f"raykafka Consumer() + assign_topic, {ASSIGN_PARTITIONS} partitions"
NEW_TOPICS_ROW = f"raykafka producer, first message to each of {NEW_TOPICS} new topics"
MEMORY_ROW = "raykafka producer processes, summed PSS"
CPU_ROW = "raykafka send_batch() CPU of our processes a message"
CHAIN_ROW = f"plain Ray chain of {WARM_PATH_CALLS} trivial calls, one at a time"
ONE_AT_A_TIME_ROW = "raykafka send() one at a time, linger.ms=0"


def _live_actors() -> list[dict[str, Any]]:
    """The live entries of Ray's actor table (`driver.ray_runtime.actor_table`)."""
    from raykafka.driver.ray_runtime import actor_table

    return [a for a in actor_table().values() if a.get("State") == "ALIVE"]


def producer_processes(producer: Any) -> dict[int, str]:
    """The live processes of `producer`'s pipeline, pid → role."""
    prefix = producer.pipeline_prefix
    return {a["Pid"]: (a.get("Name") or "")[len(prefix):].split("-", 1)[0] for a in _live_actors()
            if (a.get("Name") or "").startswith(prefix)}


def consumer_processes() -> int:
    """Live consumer actor processes (the bench runs one `Consumer` at a time)."""
    return sum(1 for a in _live_actors() if a.get("ActorClassName") in CONSUMER_CLASSES)


# ------------------------------------------------------------------------------- start-up


def assign_seconds(bootstrap: str, topic: str, runs: int) -> tuple[list[float], list[int]]:
    """Seconds from `Consumer(...)` to `assign_topic` returning, each run a new Consumer; and the
    consumer processes each run started."""
    from raykafka.driver.consumer import Consumer

    times, processes = [], []
    for _ in range(runs):
        start = time.perf_counter()
        consumer = Consumer({"bootstrap.servers": bootstrap})
        try:
            assert len(consumer.assign_topic(topic, "earliest")) == ASSIGN_PARTITIONS
            times.append(time.perf_counter() - start)
            processes.append(consumer_processes())
        finally:
            consumer.close()
    return times, processes


def new_topics_seconds(bootstrap: str, topics: list[str], config: dict[str, Any]) -> tuple[float, int, int]:
    """A warm producer (its first topic written) sends one message to each new topic in turn,
    waiting for each: the seconds that took, and its processes before and after."""
    from raykafka.driver.producer import Producer

    with Producer(config) as producer:
        assert producer.send(topics[0], b"warm").result(60).offset >= 0
        before = len(producer_processes(producer))
        start = time.perf_counter()
        for t in topics[1:]:
            assert producer.send(t, b"first").result(60).offset >= 0
        seconds = time.perf_counter() - start
        after = len(producer_processes(producer))
    return seconds, before, after


# ------------------------------------------------------------------------------- memory and CPU


class Footprint:
    """Summed PSS, RSS and USS of a set of processes, sampled every `SAMPLE_EVERY` on a thread
    while a write runs: the peak of each sum, and each process's own peak PSS."""

    def __init__(self, pids: list[int]):
        import psutil

        self.procs = [psutil.Process(pid) for pid in pids]
        self.peak = {"pss": 0, "rss": 0, "uss": 0}
        self.own_pss = {proc.pid: 0 for proc in self.procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Footprint:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            sums = dict.fromkeys(self.peak, 0)
            for proc in self.procs:
                try:
                    info = proc.memory_full_info()
                except psutil.Error:
                    continue
                for key in sums:
                    sums[key] += getattr(info, key)
                self.own_pss[proc.pid] = max(self.own_pss[proc.pid], info.pss)
            for key, value in sums.items():
                self.peak[key] = max(self.peak[key], value)
            self._stop.wait(SAMPLE_EVERY)


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds the processes have spent so far."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def ray_service_pids() -> list[int]:
    """This node's raylet and GCS: Ray's own processes, which carry our calls (reported beside
    our CPU, not in it)."""
    import psutil

    return [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in ("raylet", "gcs_server")]


def batch_footprint(topic: Callable[[], str], warm: Callable[[Any, str], None], table: Any, runs: int,
                    config: dict[str, Any]) -> dict[str, Any]:
    """One producer writes `table` with `send_batch` `runs` times (after a warm-up), each into a
    new topic made by `topic()` and first `warm`ed: the peak summed PSS/RSS/USS of its
    processes during the first write (sampled), and the CPU its processes and the driver spent
    a message in each of the others (not sampled: the sampler's reads of /proc would be counted)."""
    from raykafka.driver.producer import Producer

    n = table.num_rows
    with Producer(config) as producer:
        t = topic()
        warm(producer, t)
        roles = producer_processes(producer)
        pids = sorted(roles)
        with Footprint(pids) as footprint:
            assert producer.send_batch(t, table).result(300).delivered == n
        ours, services, per_message, services_per_message = [*pids, os.getpid()], ray_service_pids(), [], []
        for _ in range(runs):
            t = topic()
            warm(producer, t)
            before, ray_before = cpu_seconds(ours), cpu_seconds(services)
            assert producer.send_batch(t, table).result(300).delivered == n
            per_message.append((cpu_seconds(ours) - before) / n * MICROSECONDS)
            services_per_message.append((cpu_seconds(services) - ray_before) / n * MICROSECONDS)
    return {"processes": len(pids), "pss_mib": {roles[pid]: pss / MIB for pid, pss in footprint.own_pss.items()},
            "peak_mib": {key: value / MIB for key, value in footprint.peak.items()},
            "cpu_us": per_message, "ray_services_cpu_us": services_per_message}


# ------------------------------------------------------------------------------- the latency floor


class _Hop:
    """A trivial stage: hands what it gets to the next stage's `method` and returns at once."""

    def __init__(self, nxt: Any, method: str):
        self.call = getattr(nxt, method)

    def forward(self, item: Any) -> None:
        self.call.remote(item)


class _Mailbox:
    """The chain's last stage: keeps what it gets until the driver's long poll takes it."""

    def __init__(self) -> None:
        import asyncio

        self.items: list[Any] = []
        self.arrived = asyncio.Event()

    async def put(self, item: Any) -> None:
        self.items.append(item)
        self.arrived.set()

    async def poll(self) -> list[Any]:
        await self.arrived.wait()
        self.arrived.clear()
        items, self.items = self.items, []
        return items


def chain_latencies(count: int) -> list[float]:
    """Seconds each of `count` items takes through a plain-Ray chain as long as a warm message's
    path (driver → A → B → a mailbox C, which the driver long-polls: `WARM_PATH_CALLS` calls),
    one item at a time, after a warm-up."""
    import ray

    mailbox = ray.remote(num_cpus=0)(_Mailbox).remote()
    b = ray.remote(num_cpus=0)(_Hop).remote(mailbox, "put")
    a = ray.remote(num_cpus=0)(_Hop).remote(b, "forward")
    try:
        latencies = []
        for i in range(count + 1):  # the first starts the actors and is not counted
            start = time.perf_counter()
            a.forward.remote(i)
            while i not in ray.get(mailbox.poll.remote(), timeout=60):
                pass
            if i:
                latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        for actor in (a, b, mailbox):
            ray.kill(actor)


def one_at_a_time_latencies(bootstrap: str, topic: str, count: int,
                            warm: Callable[[Any, str], None]) -> list[float]:
    """Seconds from `send` to its future's outcome, one message at a time, linger.ms=0."""
    from raykafka.driver.producer import Producer

    with Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0}) as producer:
        warm(producer, topic)
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            assert producer.send(topic, b"x" * 100).result(60).offset >= 0
            latencies.append(time.perf_counter() - start)
    return latencies
