"""The producer's registry of broker workers (`BrokerRegistry`), without Ray."""

from __future__ import annotations

from raykafka.actors.broker_registry import BrokerRegistry


def registry() -> tuple[BrokerRegistry, list[tuple]]:
    started: list[tuple] = []

    def start(node_id: int, host: str, port: int, generation: int) -> str:
        started.append((node_id, generation))
        return f"worker-{node_id}-{generation}"

    return BrokerRegistry(start), started


def test_a_worker_starts_on_the_first_reference_and_closes_with_the_last():
    reg, started = registry()
    assert reg.get(1, "h", 9092) == ("worker-1-1", 1)
    assert reg.get(1, "h", 9092) == ("worker-1-1", 1)
    assert started == [(1, 1)]
    assert reg.unref(1, 1) is None  # one holder left
    assert reg.unref(1, 1) == "worker-1-1"  # the last: close it
    assert reg.get(1, "h", 9092) == ("worker-1-2", 2)  # a new generation
    assert reg.unref(1, 1) is None  # a late unref for the old generation changes nothing
    assert reg.workers[1].refs == 1


def test_prestarted_workers_are_taken_later_or_released_at_close():
    reg, started = registry()
    assert reg.prestart(1, "h", 1) and reg.prestart(2, "h", 2)
    assert not reg.prestart(1, "h", 1)  # already there
    assert reg.get(1, "h", 1) == ("worker-1-1", 1)
    assert sorted(reg.release_all()) == ["worker-1-1", "worker-2-2"]
    assert not reg.prestart(3, "h", 3)  # closing: nothing starts any more
    assert started == [(1, 1), (2, 2)] and reg.workers == {}
