"""A failed call is reported with the batches it carried, and only those: the batches handed on
after it, which the next stage accepted, are not failed in its place. With real Ray actors
standing in for the next stage; then end to end on tansu with a PartitionDispatcher killed."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import ray

from raykafka.actors.batch import MessageBatch
from raykafka.actors.calls import CallWindow

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class Stage:
    """A next stage that refuses batches whose first id is in `refused`, and takes the rest."""

    def __init__(self, refused: list[int]):
        self.refused = set(refused)
        self.taken: list[int] = []
        self.calls: list[int] = []  # the number of batches in each call

    def dispatch(self, batches: list[MessageBatch]) -> None:
        self.calls.append(len(batches))
        for batch in batches:
            if batch.ids[0] in self.refused:
                raise ValueError(f"refused batch {batch.ids[0]}")
            self.taken.append(batch.ids[0])

    add = dispatch  # as an Aggregator

    def route(self, topic: str) -> None:
        raise LookupError("no route here")  # the topic stays with this stage

    def taken_ids(self) -> list[int]:
        return self.taken

    def call_sizes(self) -> list[int]:
        return self.calls


def batch(i: int) -> MessageBatch:
    return MessageBatch(topic="t", ids=range(i, i + 1), values=[b"v"])


def test_a_failed_call_is_reported_with_its_own_batches(ray_session):
    """Each call carries its batches; the one that failed goes to `on_failed` with them."""
    stage = Stage.remote([1])
    failed: list[tuple[list[int], Exception]] = []
    window = CallWindow(1, lambda carried, exc: failed.append((carried, exc)))
    for i in range(4):
        window.submit(stage.dispatch.remote([batch(i)]), [i])
    assert window.drain(30) == 0
    assert [carried for carried, _ in failed] == [[1]]
    assert "refused batch 1" in str(failed[0][1])
    assert ray.get(stage.taken_ids.remote()) == [0, 2, 3]


def test_an_outbox_sends_one_call_per_aggregator_and_fails_a_batch_through_its_own_route(ray_session):
    """What a LeaderDispatcher's call sends goes as one Aggregator.add per broker, the batches in the
    order they were put; when a call fails, each partition's route reports its own batches, once."""
    from raykafka.actors.leader_dispatcher import Outbox

    good, bad = Stage.remote([]), Stage.remote([5])
    failed: list[tuple[int, list[int]]] = []

    class Route:
        def __init__(self, p: int):
            self.window = CallWindow(4, lambda carried, exc: failed.append((p, [b.ids[0] for b in carried])))
            self.parked = []

    routes = {p: Route(p) for p in range(3)}
    outbox = Outbox()
    for i, p in enumerate([0, 1, 0, 2, 1, 2]):  # partitions 0 and 1 lead on `good`, 2 on `bad`
        outbox.put(bad if p == 2 else good, routes[p], batch(i))
    outbox.send()
    assert not outbox.pending
    for route in routes.values():
        assert route.window.drain(30) == 0
    assert ray.get(good.call_sizes.remote()) == [4]
    assert ray.get(good.taken_ids.remote()) == [0, 1, 2, 4]
    assert ray.get(bad.call_sizes.remote()) == [2]
    assert failed == [(2, [3, 5])]


@ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)
class GatedStage:
    """A next stage whose calls take their batches at once and return only once `open` is called.
    An async actor may start calls out of order (a BrokerWorker puts them back in order by
    their numbers, `calls_to`): each call's batches are kept as one list."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls: list[list[int]] = []

    async def add(self, batches: list[MessageBatch]) -> None:
        self.calls.append([b.ids[0] for b in batches])
        await self.gate.wait()

    async def open(self) -> None:
        self.gate.set()

    async def taken_calls(self) -> list[list[int]]:
        return sorted(self.calls)


class _Route:
    def __init__(self, limit: int):
        self.window = CallWindow(limit, lambda carried, exc: None)
        self.parked: list = []


def test_a_full_window_keeps_its_partitions_batches_in_order_and_nothing_waits(ray_session):
    """A partition whose window of calls is full keeps its batches (in order, behind those it kept
    before) and `send` returns at once, so another partition's batches go meanwhile. Once a call
    returns, `wake_when_room` calls back and the next `send` sends them, in one call."""
    from raykafka.actors.leader_dispatcher import Outbox

    slow, fast = GatedStage.remote(), Stage.remote([])
    kept, other = _Route(2), _Route(2)
    outbox = Outbox()
    for i in range(3):  # a call each; the third finds two out
        outbox.put(slow, kept, batch(i))
        outbox.send()
    assert [b.ids[0] for _, b in kept.parked] == [2] and len(kept.window) == 2
    outbox.put(fast, other, batch(10))
    outbox.put(slow, kept, batch(3))
    started = time.monotonic()
    outbox.send()
    assert time.monotonic() - started < 10  # the gate stays shut: waiting for room would not end
    assert ray.get(fast.taken_ids.remote(), timeout=30) == [10]
    assert [b.ids[0] for _, b in kept.parked] == [2, 3] and list(outbox.parked) == [kept]
    woken = threading.Event()
    outbox.wake_when_room(woken.set)
    ray.get(slow.open.remote())
    assert woken.wait(30)
    outbox.send()
    assert not outbox.parked and not kept.parked and kept.window.drain(30) == 0
    assert ray.get(slow.taken_calls.remote()) == [[0], [1], [2, 3]]  # what was kept, in order, in one call


def test_a_partition_leaving_its_broker_sends_what_it_kept_there_before_its_chaser(ray_session):
    """`send(leaving=route)`: the kept batches and the chaser go to the old broker at once, past
    the window's bound, in order (the window then goes to `LeftBrokers`)."""
    from raykafka.actors.leader_dispatcher import Outbox

    slow = GatedStage.remote()
    route = _Route(1)
    outbox = Outbox()
    for i in range(3):
        outbox.put(slow, route, batch(i))
        outbox.send()
    assert [b.ids[0] for _, b in route.parked] == [1, 2]
    outbox.put(slow, route, batch(99))  # the chaser
    outbox.send(leaving=route)
    assert not route.parked and not outbox.parked and len(route.window) == 2
    ray.get(slow.open.remote())
    assert route.window.drain(30) == 0
    assert ray.get(slow.taken_calls.remote()) == [[0], [1, 2, 99]]


def test_topic_routes_fail_the_batches_of_the_call_that_failed_not_the_next_ones(ray_session):
    """Today's window raised the older call's error at the caller, which failed the batches it
    had just handed on (accepted by then) while the refused ones waited for the watchdog."""
    from raykafka.driver.topic_routes import TopicRoutes

    stage = Stage.remote([1])
    answered = threading.Event()
    routes = TopicRoutes(stage, 1, answered.set)
    failed = routes.send([batch(0)])
    assert answered.wait(30)  # the stage answers it has no route for the topic
    failed += routes.send([])  # the topic stays with the stage
    for i in (1, 2, 3):
        failed += routes.send([batch(i)])
    assert [[b.ids[0] for b in batches] for batches, _ in failed] == [[1]]
    assert routes.drain(30) == []
    from raykafka.wire.errors import PipelineError

    error = failed[0][1]
    assert isinstance(error, PipelineError) and "refused batch 1" in str(error) and "Stage.dispatch" in str(error)
    assert ray.get(stage.taken_ids.remote()) == [0, 2, 3]


def test_a_dead_actor_is_named_in_the_error(ray_session):
    from raykafka.actors.calls import pipeline_error
    from raykafka.wire.errors import PipelineError

    stage = Stage.options(name="some-producer/partition_dispatcher-t").remote([])
    ray.get(stage.taken_ids.remote())
    ray.kill(stage, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError) as raised:
        ray.get(stage.dispatch.remote([batch(0)]), timeout=30)
    error = pipeline_error(raised.value)
    assert isinstance(error, PipelineError)
    assert str(error).startswith("producer actor some-producer/partition_dispatcher-t died: ")
    assert "ray.kill" in str(error)


@pytest.mark.broker
def test_a_dead_partition_dispatcher_is_healed_and_what_is_sent_next_is_delivered(ray_session, bootstrap, topic_name):
    """With the topic's PartitionDispatcher killed, what is sent next reaches the broker through
    a rebuilt pipeline in a few seconds; nothing waits for delivery.timeout.ms (120 s)."""
    from raykafka.driver.admin import Admin
    from raykafka.driver.producer import Producer

    topic = topic_name("deadpd")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2})
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "delivery.timeout.ms": 120_000}) as producer:
        assert producer.send(topic, b"routed").result(60).offset == 0  # the route to it is taken
        (name,) = [n for n in ray.util.list_named_actors() if n.startswith(f"{producer.name}/partition_dispatcher")]
        ray.kill(ray.get_actor(name), no_restart=True)
        futures = [producer.send(topic, b"m%d" % i) for i in range(100)]
        start = time.monotonic()
        assert producer.flush(60) == 0
        took = time.monotonic() - start
        assert took < 20, f"flush took {took:.1f}s"
        assert producer.healed == 1 and name in producer.heals_done[0].cause
        where = {(f.result(0).partition, f.result(0).offset) for f in futures}
        assert len(where) == 100 and all(offset >= 0 for _, offset in where)


@ray.remote(num_cpus=0, max_restarts=0)
class Results:
    """A RetryHandler that keeps what is reported to its mailbox."""

    def __init__(self):
        self.reported: list[tuple] = []

    def report(self, entries: list[tuple], spans: list[tuple] = ()) -> None:
        self.reported.extend(entries)

    def reports(self) -> list[tuple]:
        return self.reported


def test_a_leader_dispatchers_failed_call_to_the_aggregator_fails_its_own_batch(ray_session):
    """A call to a partition's Aggregator fails: the batch it carried fails, with the cause,
    and the route goes on (it no longer raises the older call's error at the next send)."""
    from types import SimpleNamespace

    from raykafka.actors.leader_dispatcher import Outbox, PartitionRoute
    from raykafka.wire.errors import PipelineError

    results = Results.remote()
    actor = SimpleNamespace(ctx=SimpleNamespace(window=1, retry_handler=results), outbox=Outbox())
    route = PartitionRoute(actor, "t", 0)
    route.aggregator = Stage.remote([1])  # as an Aggregator: `add` refuses batch 1
    for i in range(4):  # a call each: each waits for room in the window of one (else they go as one call)
        route.send(batch(i))
        actor.outbox.send()  # as each of the LeaderDispatcher's calls ends
        assert route.window.drain(30) == 0 and not actor.outbox.parked
    (failed,) = ray.get(results.reports.remote())
    ids, topic, partition, offset, _, error = failed
    assert (list(ids), topic, partition, offset) == ([1], "t", 0, -1)
    assert isinstance(error, PipelineError) and "refused batch 1" in str(error), repr(error)
