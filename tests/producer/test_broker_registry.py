"""The producer's registry of broker workers (`BrokerRegistry`), without Ray: where each broker
is placed, who holds it, and what is closed when."""

from __future__ import annotations

from raykafka.actors.broker_registry import NO_BROKER, BrokerRegistry, Closing, RetryWriters


def registry(max_workers: int = 0, dead: set[str] | None = None) -> tuple[BrokerRegistry, list[tuple], list[tuple]]:
    """A registry whose workers are names; those in `dead` do not answer."""
    dead = set() if dead is None else dead
    started: list[tuple] = []
    hosted: list[tuple] = []

    def start(generation: int, node_id: int, host: str, port: int) -> str:
        started.append((node_id, generation))
        return f"worker-{node_id}-{generation}"

    def host(handle: str, generation: int, node_id: int, host: str, port: int) -> None:
        hosted.append((handle, node_id, generation))

    return BrokerRegistry(start, host, lambda worker: worker not in dead, max_workers), started, hosted


def test_a_broker_closes_with_its_last_reference_and_its_worker_takes_the_next_placement():
    reg, started, hosted = registry()
    assert reg.get(1, "h", 9092) == ("worker-1-1", 1)
    assert reg.get(1, "h", 9092) == ("worker-1-1", 1)
    assert started == [(1, 1)]
    assert reg.unref(1, 1) is None  # one holder left
    assert reg.unref(1, 1) == Closing("worker-1-1", 1, last=False)  # the last: close the broker, keep its worker
    assert reg.get(1, "h", 9092) == ("worker-1-1", 2)  # a new generation, on the same process
    assert started == [(1, 1)] and hosted == [("worker-1-1", 1, 2)]
    assert reg.unref(1, 1) is None  # a late unref for the old generation changes nothing
    assert reg.brokers[1].refs == 1
    assert reg.release_all() == [Closing("worker-1-1", 2, last=True)]


def test_a_retried_partition_costs_no_process_however_often_its_broker_is_let_go():
    """Each retry of a partition whose broker nobody else holds lets the broker go (Sarama's
    unref on an error) and takes it again: a new generation each time, on the one process."""
    reg, started, hosted = registry()
    for generation in range(1, 11):
        assert reg.get(1, "h", 9092) == ("worker-1-1", generation)
        assert reg.unref(1, generation) == Closing("worker-1-1", generation, last=False)
    assert started == [(1, 1)] and len(hosted) == 9 and len(reg.workers) == 1


def test_prestarted_workers_are_taken_later_or_released_at_close():
    reg, started, _ = registry()
    assert reg.prestart(1, "h", 1) and reg.prestart(2, "h", 2)
    assert not reg.prestart(1, "h", 1)  # already there
    assert reg.get(1, "h", 1) == ("worker-1-1", 1)
    assert sorted(reg.release_all()) == [Closing("worker-1-1", 1, True), Closing("worker-2-2", 2, True)]
    assert not reg.prestart(3, "h", 3)  # closing: nothing starts any more
    assert started == [(1, 1), (2, 2)] and reg.brokers == {} and reg.workers == []


def test_past_the_cap_a_broker_goes_to_the_worker_hosting_the_fewest():
    reg, started, hosted = registry(max_workers=2)
    for node in range(1, 9):  # eight brokers, two worker processes
        reg.get(node, "h", 9000 + node)
    assert started == [(1, 1), (2, 2)]
    assert [(handle, node) for handle, node, _ in hosted] == [
        ("worker-1-1", 3), ("worker-2-2", 4), ("worker-1-1", 5), ("worker-2-2", 6), ("worker-1-1", 7),
        ("worker-2-2", 8)]
    assert len(reg.workers) == 2 and sorted(len(w.generations) for w in reg.workers) == [4, 4]
    # a broker closed on a worker that hosts others: the worker stays
    assert reg.unref(3, 3) == Closing("worker-1-1", 3, last=False)
    reg.get(9, "h", 9009)  # the fewest now: worker 1, which has room again
    assert hosted[-1][:2] == ("worker-1-1", 9)


def test_a_worker_hosting_none_takes_the_next_broker_and_exits_at_close():
    reg, started, hosted = registry(max_workers=2)
    reg.get(1, "h", 1)
    reg.get(2, "h", 2)  # two workers
    assert reg.unref(1, 1) == Closing("worker-1-1", 1, last=False)  # worker 1 hosts none now
    assert reg.get(3, "h", 3) == ("worker-1-1", 3)  # placed there, not on a new process
    assert reg.unref(3, 3) == Closing("worker-1-1", 3, last=False)
    assert sorted(reg.release_all(), key=str) == [Closing("worker-1-1", NO_BROKER, last=True),
                                                  Closing("worker-2-2", 2, last=True)]  # each worker exits
    assert started == [(1, 1), (2, 2)] and hosted == [("worker-1-1", 3, 3)] and reg.workers == []


def test_the_cap_is_broker_worker_actors_or_the_nodes_cpus():
    import os

    from raykafka.actors.retry_handler import max_broker_workers
    from raykafka.wire.config import parse_config

    assert max_broker_workers(parse_config({"bootstrap.servers": "h:1"})) == (os.cpu_count() or 1)
    assert max_broker_workers(parse_config({"bootstrap.servers": "h:1", "broker.worker.actors": 3})) == 3


def test_a_close_waits_for_the_brokers_of_living_workers_not_for_a_dead_idle_one():
    """A worker stays, hosting none, after its broker closed: dead, it held no reference, so a
    close waiting for the brokers still waits for the living worker's; a dead worker that hosted
    two brokers holds both for good."""
    writers = RetryWriters()
    writers.add()  # the driver's
    writers.add("w1")
    writers.drop("w1")  # w1's broker answered its last: w1 hosts none now
    writers.add("w2")
    writers.drop()  # the driver closes
    assert writers.held(dead=["w1"]) == 1  # w2's broker is still open: wait for it
    writers.add("w3")
    writers.add("w3")
    assert writers.held(dead=["w1", "w3", "w3"]) == 1  # w3's two never let go; w2's still counts
    writers.drop("w2")
    assert writers.held(dead=["w1", "w3"]) == 0 and writers.held() == 2


def test_a_dead_worker_is_forgotten_and_its_next_broker_goes_elsewhere():
    """A worker killed while it hosts none would otherwise take every later placement (a
    transactional producer, which does not heal, would send nowhere until it closes)."""
    dead: set[str] = set()
    reg, started, hosted = registry(dead=dead)
    assert reg.get(1, "h", 9092) == ("worker-1-1", 1)
    assert reg.unref(1, 1) == Closing("worker-1-1", 1, last=False)  # the worker hosts none now
    dead.add("worker-1-1")
    assert reg.get(1, "h", 9092) == ("worker-1-2", 2)  # a new process, not the dead one
    assert started == [(1, 1), (1, 2)] and hosted == []

    dead = set()
    reg, started, hosted = registry(max_workers=1, dead=dead)
    reg.get(1, "h", 9092)
    assert reg.get(2, "h", 9093) == ("worker-1-1", 2)  # at the cap: hosted by the running one
    dead.add("worker-1-1")
    assert reg.get(3, "h", 9094) == ("worker-3-3", 3)  # it died: forgotten, so a process may start
    assert hosted == [("worker-1-1", 2, 2)]
    assert sorted(c.generation for c in reg.release_all()) == [1, 2, 3]  # every broker still closes

