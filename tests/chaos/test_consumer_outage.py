"""Consumers through a broker outage: a producer writes all along, a `Consumer` (partitions
assigned) and a `ConsumerGroup` of 3 members read; the broker goes away for 2, 10 or 60 s and
comes back. Two forms: `unreachable` (a proxy in front of tansu stops accepting and drops every
connection; tansu keeps running) and `restart` (tansu on S3 storage is killed and started again
on the same port, with its log, offsets and groups). Everything written before, during and after
the outage is read by both consumers: nothing lost. The Consumer keeps its positions, so it
reads each message once; a group member whose session expired resumes from its last commit,
and the figures count what it processed again."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import outage as outage_mod  # tests/chaos/, on the path (conftest.py)
import pytest

from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.driver.producer import Producer

pytestmark = [pytest.mark.ray, pytest.mark.broker, pytest.mark.timeout(900)]


PARTITIONS = 4
MEMBERS = 3
CHUNK, PACE = 20, 0.05  # messages written per step, seconds between steps: ~400 msg/s
AFTER_S = 5.0  # seconds of writing after the broker is back
# what a stalled member's status shows of it: its claims, its generations, whether it is
# joining, what it fetched, committed and met
MEMBER_STATE = ("member_id", "claims", "generations", "joining", "heartbeats", "fetched_batches", "committed", "last_end_reason",
                "error", "fatal", "failed_partitions")
GROUP = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, "auto.commit.interval.ms": 1000,
         "auto.offset.reset": "earliest"}


class Writer:
    """Sends paced messages from a thread until stopped; remembers when each was sent."""

    def __init__(self, producer: Producer, ledger, topic: str):
        self.producer, self.ledger, self.topic = producer, ledger, topic
        self.sent_at: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(CHUNK):
                i = len(self.sent_at)
                self.ledger.send(self.producer, self.topic, b"o%07d" % i, partition=i % PARTITIONS)
                self.sent_at.append(time.monotonic())
            self._stop.wait(PACE)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class Reader:
    """A `Consumer` of every partition, reading from a thread into a Counter of values."""

    def __init__(self, config: dict, topic: str):
        self.consumer = Consumer(config)
        self.consumer.assign_topic(topic, "earliest")
        self.seen: Counter[bytes] = Counter()
        self.first_seen: dict[bytes, float] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for batch in self.consumer.batches(timeout=1):
                    now = time.monotonic()
                    for v in batch.column("value").to_pylist():
                        self.seen[v] += 1
                        self.first_seen.setdefault(v, now)
                    if self._stop.is_set():
                        break
        except BaseException as exc:  # noqa: BLE001 - recorded and asserted on: the reader must not fail
            self.error = exc

    def stop(self) -> dict[str, str]:
        self._stop.set()
        self._thread.join(60)
        return self.consumer.close()


def _group_seen(sink: Path) -> tuple[Counter[bytes], dict[bytes, float]]:
    """Every value the group's handlers processed (with repeats), and when each was first written
    (the files' lines carry the wall-clock time of the batch)."""
    seen: Counter[bytes] = Counter()
    first: dict[bytes, float] = {}
    for f in sink.iterdir():
        for line in f.read_bytes().split(b"\n")[:-1]:  # not the last piece: a line still being written
            if line:
                stamp, value = line.split(b" ", 1)
                seen[value] += 1
                first.setdefault(value, float(stamp))
    return seen, first


def _by_partition(counts: dict[bytes, int]) -> dict[int, list[int]]:
    """Per partition: the sum of the counts of its values, and the first and last index written
    among them (the Writer sends index i, value b"o%07d" % i, to partition i % PARTITIONS)."""
    out: dict[int, list[int]] = {}
    for value, n in counts.items():
        i = int(value[1:])
        count, first, last = out.get(i % PARTITIONS, (0, i, i))
        out[i % PARTITIONS] = [count + n, min(first, i), max(last, i)]
    return dict(sorted(out.items()))


def _redelivered_by_partition(seen: Counter[bytes]) -> dict[int, list[int]]:
    """Per partition: how many messages were processed more than once, first and last index."""
    return _by_partition({value: n - 1 for value, n in seen.items() if n > 1})


def _gaps(missing: set[bytes]) -> str:
    """How many of `missing` each partition lacks, and the first and last index among them."""
    return f"{len(missing)}: " + ", ".join(f"partition {p}: {n} ({first}-{last})"
                                           for p, (n, first, last) in _by_partition(dict.fromkeys(missing, 1)).items())


def _described(state: Any) -> Any:
    """`state()`, or what kept it from answering: a failure's message must not fail itself."""
    try:
        return state()
    except Exception as exc:  # noqa: BLE001 - only the message is at stake
        return f"unavailable: {exc!r}"


def _outage_cases() -> list[Any]:
    """Every mode at 2, 10 and 60 s; the default tier keeps the unreachable broker at 2 s (a
    restarted broker is met in the default tier by tests/chaos/test_broker_restart.py's producer,
    and here, with consumers, under `slow`: 30-65 s each)."""
    eager = [pytest.param(mode, outage_s, None, id=f"{mode}-{outage_s}",
                          marks=() if (mode, outage_s) == ("unreachable", 2) else pytest.mark.slow)
             for outage_s in (2, 10, 60) for mode in ("unreachable", "restart")]
    # the cooperative protocol's members rejoin beside their claims: a minute's outage, under `slow`
    cooperative = [pytest.param(mode, 60, "cooperative-sticky", id=f"{mode}-60-cooperative", marks=pytest.mark.slow)
                   for mode in ("unreachable", "restart")]
    return eager + cooperative


@pytest.mark.parametrize(("mode", "outage_s", "strategy"), _outage_cases())
def test_consumers_ride_out_a_broker_outage(ray_session, restartable_broker, kit, ledger, record, tmp_path,
                                            live_actors_of, mode, outage_s, strategy):
    """A producer (~400 msg/s), a Consumer of 4 partitions and a ConsumerGroup of 3 members
    (session.timeout.ms=10000) through an outage; defaults for reconnect.backoff.ms (100) and
    reconnect.backoff.max.ms (10000)."""
    outage = outage_mod.Outage(mode, restartable_broker, tmp_path)
    bootstrap = outage.bootstrap
    topic = "outage"
    kit.create_topic(bootstrap, topic, PARTITIONS)
    sink = tmp_path / "group"
    sink.mkdir()

    def handle(batch, _dir=str(sink)):  # in the member actors: what was processed, with when
        import os as _os
        import time as _time

        stamp = b"%.3f " % _time.monotonic()
        with open(_os.path.join(_dir, f"{_os.getpid()}.txt"), "ab") as fh:
            fh.write(b"".join(stamp + v + b"\n" for v in batch.column("value").to_pylist()))

    delivered_at: list[float] = []

    def on_delivery(meta, error) -> None:
        if error is None:
            delivered_at.append(time.monotonic())
        ledger.on_delivery(meta, error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}, on_delivery=on_delivery)
    writer = Writer(producer, ledger, topic).start()
    reader = Reader({"bootstrap.servers": bootstrap}, topic).start()
    strategy_config = {} if strategy is None else {"partition.assignment.strategy": strategy}
    group = ConsumerGroup({"bootstrap.servers": bootstrap, "group.id": f"outage-{mode}", **GROUP, **strategy_config},
                          topic, handle,
                          members=MEMBERS)
    closed = {}
    try:
        kit.wait_for(lambda: sum(bool(s["claims"]) for s in group.status()) == MEMBERS
                     and reader.seen and _group_seen(sink)[0], timeout=120, what="every member consuming")
        written = {ledger.values[i] for i, f in enumerate(list(ledger.futures)) if f.done() and not f.exception()}
        kit.wait_for(lambda: written <= set(reader.seen) and written <= set(_group_seen(sink)[0]), timeout=120,
                     what="both consumers caught up with the producer")  # the outage strikes a steady state
        n_before = len(ledger.futures)
        t_cut = outage.cut()
        time.sleep(outage_s)  # the outage itself
        t_back = outage.restore()
        n_back = len(ledger.futures)
        time.sleep(AFTER_S)  # writing goes on after the broker is back
        writer.stop()
        figures = ledger.settle(timeout=180)
        settled = time.monotonic() - t_back
        delivered = {ledger.values[i] for i in ledger.delivered}
        try:
            kit.wait_for(lambda: delivered <= set(reader.seen) and delivered <= set(_group_seen(sink)[0]),
                         timeout=120 + outage_s, what="both consumers reading everything delivered")
        except AssertionError as exc:  # which of the two stalled, where, and in what state
            raise AssertionError(f"{exc}: of {len(delivered)} delivered, the Consumer lacks "
                                 f"{_gaps(delivered - set(reader.seen))} (its fetch loops: "
                                 f"{_described(reader.consumer.broker_consumer_stats)}), the group "
                                 f"{_gaps(delivered - set(_group_seen(sink)[0]))} (its members: "
                                 f"{_described(lambda: [{k: m.get(k) for k in MEMBER_STATE} for m in group.status()])})"
                                 ) from exc
        caught_up = time.monotonic() - t_back
        statuses = group.status()
        in_log = ledger.check_log(kit.read_back(bootstrap, topic, PARTITIONS, len(ledger.delivered)))
    finally:
        writer.stop()
        closed["group"] = group.close()
        closed["consumer"] = reader.stop()
        producer.close(30)
        outage.close()
    group_seen, group_first = _group_seen(sink)
    after = [ledger.values[i] for i in range(n_back, len(ledger.futures)) if i in ledger.delivered]

    def first_after(first_seen: dict[bytes, float]) -> float | None:
        """Seconds from the broker's return until the first message sent after it was read."""
        times = [first_seen[v] for v in after if v in first_seen]
        return round(min(times) - t_back, 1) if times else None

    def first_new(first_seen: dict[bytes, float]) -> float | None:
        """Seconds from the broker's return until anything not read before it was read."""
        times = [t for t in first_seen.values() if t > t_back]
        return round(min(times) - t_back, 1) if times else None

    group_errors = [e for s in statuses for e in s.get("errors", [])]
    record(**figures, lost=len(delivered - set(reader.seen)) + len(delivered - set(group_seen)),
           reordered=in_log["reordered"], duplicated=sum(n - 1 for n in reader.seen.values() if n > 1),
           faults={f"outage/{mode}": 1}, actors_killed=[], mode=mode, outage_s=outage_s, strategy=strategy,
           sent_before=n_before, sent_during=n_back - n_before, sent_after=len(ledger.futures) - n_back,
           consumer_read=len(set(reader.seen)), consumer_lost=len(delivered - set(reader.seen)),
           consumer_repeats=sum(n - 1 for n in reader.seen.values() if n > 1),
           group_processed=len(set(group_seen)), group_lost=len(delivered - set(group_seen)),
           group_redelivered=sum(n - 1 for n in group_seen.values() if n > 1),
           group_redelivered_by_partition=_redelivered_by_partition(group_seen),
           group_redelivered_first_read=dict(Counter(  # when a message processed again was first processed
               "before the outage" if group_first[v] < t_cut else "during it" if group_first[v] < t_back
               else "after it" for v, n in group_seen.items() if n > 1)),
           consumer_first_after_s=first_after(reader.first_seen), group_first_after_s=first_after(group_first),
           consumer_resumed_s=first_new(reader.first_seen), group_resumed_s=first_new(group_first),
           producer_resumed_s=round(min((t for t in delivered_at if t > t_back), default=t_back - 1) - t_back, 1),
           failed_but_read=sum(1 for i in ledger.failed if ledger.values[i] in reader.seen),
           sample_causes=sorted({str(e).splitlines()[0][:200] for e in ledger.failed.values()})[:3],
           seconds_to_catch_up=round(caught_up, 1), seconds_down=round(t_back - t_cut, 1),
           producer_settled_s=round(settled, 1),
           consumer_all_read_s=round(max(reader.first_seen[v] for v in delivered) - t_back, 1),
           group_all_read_s=round(max(group_first[v] for v in delivered) - t_back, 1),
           group_generations=sorted(s["generations"] for s in statuses), group_member_errors=[s["error"] for s in statuses],
           group_errors=[f"{e[0]}: {e[2]}"[:200] for e in group_errors][:5])
    assert reader.error is None, f"the Consumer failed: {reader.error!r}"
    assert figures["unresolved"] == 0, figures
    # the producer holds its batches through the outage: nothing fails while the broker is away.
    # After a real restart, tansu may answer a batch re-sent DUPLICATE_SEQUENCE_NUMBER that its
    # log does not hold (lost in the crash): the producer looks for it, and fails it naming that
    assert not [i for i in ledger.failed if ledger.values[i] in reader.seen], "a failed message was written"
    allowed = {"unreachable": set(), "restart": {"UnknownOffsetError"}}[mode]
    assert set(figures["failed_by_cause"]) <= allowed, figures["failed_by_cause"]
    for e in ledger.failed.values():
        assert "not found in the log" in str(e), e
    assert delivered <= set(reader.seen), "the Consumer read everything delivered"
    assert delivered <= set(group_seen), "the group processed everything delivered"
    assert not any(n > 1 for n in reader.seen.values()), "the Consumer reads each message once"
    assert not [s.get("fatal") for s in statuses if s.get("fatal")], statuses
    assert closed["consumer"] == {}, closed["consumer"]
    assert all(r["fatal"] is None for r in closed["group"]), closed["group"]
    assert live_actors_of() == [], "close leaves no consumer actor"
    assert os.listdir(sink)


@pytest.mark.slow  # 13 s; the default tier keeps the consumers' outage
def test_cli_group_consumer_rides_out_a_six_second_outage(restartable_broker, kit, record, tmp_path):
    """`raykafka consume -g` with the broker unreachable for 6 s: it keeps running, prints what is
    written after the outage, and exits 0 at SIGTERM having committed what it printed."""
    import signal
    import subprocess
    import sys

    outage = outage_mod.Outage("unreachable", restartable_broker, tmp_path)
    topic, group = "cli-outage", "cli-outage-group"
    kit.create_topic(outage.bootstrap, topic, 2)
    outage_mod.produce(outage.bootstrap, topic, [b"before-%d" % i for i in range(10)], 2)
    proc = subprocess.Popen([sys.executable, "-m", "raykafka.app.cli", "consume", "-b", outage.bootstrap, "-t", topic,
                             "-g", group, "-X", "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=1000"],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "cli.err", "w"), text=True)  # noqa: SIM115
    printed: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [printed.put(line.strip()) for line in proc.stdout], daemon=True).start()

    def lines(n: int) -> list[str]:
        return [printed.get(timeout=120) for _ in range(n)]  # in the order printed

    try:
        before = lines(10)
        t_cut = outage.cut()
        time.sleep(6)  # the outage itself
        t_back = outage.restore()
        alive_after_outage = proc.poll() is None
        outage_mod.produce(outage.bootstrap, topic, [b"after-%d" % i for i in range(10)], 2)
        after = lines(10)
        resumed = time.monotonic() - t_back
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
        outage.close()
    err = (tmp_path / "cli.err").read_text()
    written = [f"{when}-{i}" for when in ("before", "after") for i in range(10)]  # `produce`: i to partition i % 2
    read = [(int(line.rsplit("-", 1)[-1]) % 2, line) for line in before + after]
    record(sent=len(written), delivered=len(before) + len(after), failed=0, **kit.consumed_figures(read, written),
           faults={"outage/unreachable": 1}, actors_killed=[], outage_s=round(t_back - t_cut, 1),
           seconds_to_print_after_outage=round(resumed, 1), exit_status=proc.returncode,
           stderr_tail=err.strip().splitlines()[-3:])
    assert alive_after_outage, err
    assert sorted(before) == sorted(written[:10])
    assert sorted(after) == sorted(written[10:]), (after, err)
    assert proc.returncode == 0, err


def test_ray_data_read_rides_out_a_two_second_outage(restartable_broker, kit, record, tmp_path):
    """A Ray Data read task's fetch loop (`read_ranges`: three ranges over one connection) with
    the broker cut off mid-read for 2 s: every range's fetch is lost with the connection; each
    reconnects and returns exactly its range."""
    from raykafka.spark_bridge.offsets import PartitionRange
    from raykafka.spark_bridge.ray_data import read_ranges

    outage = outage_mod.Outage("unreachable", restartable_broker, tmp_path)
    n = 30_000
    try:
        kit.create_topic(outage.bootstrap, "rd", 3)
        outage_mod.produce(outage.bootstrap, "rd", [b"r%06d" % i for i in range(n)], partitions=3,
                           **{"batch.num.messages": 10})  # small batches: many fetches
        config = {"bootstrap.servers": outage.bootstrap, "fetch.max.bytes": 1024, "max.partition.fetch.bytes": 1024}
        result: dict = {}

        def read() -> None:
            try:
                tables = list(read_ranges(config, [PartitionRange("rd", p, 0, n // 3) for p in range(3)]))
                result["rows"] = [kit.rows(t) for t in tables]  # (partition, value), as read
            except Exception as exc:  # noqa: BLE001 - asserted on below
                result["error"] = exc

        reader = threading.Thread(target=read, daemon=True)
        requests = outage.proxy.faults["requests"]
        reader.start()
        kit.wait_for(lambda: outage.proxy.faults["requests"] > requests + 20, timeout=60, what="the read under way")
        t_cut = outage.cut()
        cut_mid_read = reader.is_alive()
        time.sleep(2)  # the outage itself
        t_back = outage.restore()
        reader.join(180)
        finished = time.monotonic() - t_back
    finally:
        outage.close()
    read = [row for rows in result.get("rows", []) for row in rows]
    by_range = [[v for _, v in rows] for rows in result.get("rows", [])]
    record(sent=n, delivered=len(read), failed=0, **kit.consumed_figures(read, [b"r%06d" % i for i in range(n)]),
           faults={"outage/unreachable": 1}, actors_killed=[],
           outage_s=round(t_back - t_cut, 1), seconds_to_finish_after_outage=round(finished, 1),
           error=repr(result.get("error")))
    assert cut_mid_read, "the outage came while the read was under way"
    assert "error" not in result, result.get("error")
    assert by_range == [[b"r%06d" % i for i in range(p, n, 3)] for p in range(3)]  # each range whole, in order
