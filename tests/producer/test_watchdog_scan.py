"""The producer's watchdog names the actor that died (driver/producer_watchdog.py), read from a
scripted actor table: a Flusher killed on its own is named even after its Aggregator closed
(the dispatchers let go of the broker), while a Flusher its closing Aggregator took along is not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raykafka.driver import producer_watchdog
from raykafka.driver.producer_watchdog import FLUSHER_DIED_FIRST_MS, ProducerWatchdog

KILLED = "ActorDiedErrorContext: killed by ray.kill"
CLOSED = "ActorDiedErrorContext: INTENDED_USER_EXIT exit_actor()"


def _table(flusher_end: int, aggregator_end: int, aggregator_state: str = "DEAD") -> dict:
    aggregator = {"Name": "p/aggregator-111-1", "State": aggregator_state, "DeathCause": CLOSED,
                  "Address": {"Port": 7001}, "OwnerAddress": {"Port": 7000}, "EndTime": aggregator_end}
    flusher = {"Name": "p/flusher-111-5", "State": "DEAD", "DeathCause": KILLED,
               "Address": {"Port": 7002}, "OwnerAddress": {"Port": 7001}, "EndTime": flusher_end}
    return {"a": aggregator, "f": flusher}


def _dog() -> ProducerWatchdog:
    producer = SimpleNamespace(name="p", pipeline_prefix="p/", stopping=False, config={"delivery.timeout.ms": 6000, "request.timeout.ms": 3000})
    return ProducerWatchdog(producer)


@pytest.mark.parametrize(("flusher_end", "aggregator_end", "named"), [
    (1_000_000, 1_000_000 + FLUSHER_DIED_FIRST_MS + 500, True),  # killed, then its Aggregator closed later
    (1_000_000, 1_000_020, False),  # the closing Aggregator killed it as it exited
])
def test_a_flusher_that_died_before_its_aggregator_closed_is_named(monkeypatch, flusher_end, aggregator_end, named):
    import ray._private.state

    monkeypatch.setattr(ray._private.state, "actors", lambda: _table(flusher_end, aggregator_end))
    dog = _dog()
    dog._scan_actors(patient=False)
    assert (dog.dead == {"p/flusher-111-5": "killed by ray.kill"}) is named, dog.dead
    message = dog._message(9)
    assert ("p/flusher-111-5" in message) is named and ("every producer actor is alive" in message) is not named


def test_a_dead_flusher_whose_aggregator_lives_is_named(monkeypatch):
    import ray._private.state

    monkeypatch.setattr(ray._private.state, "actors", lambda: _table(1_000_000, 0, aggregator_state="ALIVE"))
    dog = _dog()
    dog._scan_actors(patient=False)
    assert list(dog.dead) == ["p/flusher-111-5"]
    assert producer_watchdog._ended_before({"EndTime": 0}, {"EndTime": 5000}, 1000) is False  # unknown end time
