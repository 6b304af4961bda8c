"""The producer's watchdog names the actor that died (driver/producer_watchdog.py), read from a
scripted actor table: a BrokerWorker killed (or crashed) is named, while one that closed itself
(`exit_actor`, as the producer closes) is not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raykafka.driver.producer_watchdog import ProducerWatchdog

KILLED = "ActorDiedErrorContext: killed by ray.kill"
CLOSED = "ActorDiedErrorContext: INTENDED_USER_EXIT exit_actor()"


def _table(cause: str, state: str = "DEAD") -> dict:
    worker = {"Name": "p/broker_worker-111-1", "State": state, "DeathCause": cause}
    retry_handler = {"Name": "p/retry_handler", "State": "ALIVE", "DeathCause": ""}
    return {"w": worker, "r": retry_handler}


def _dog() -> ProducerWatchdog:
    producer = SimpleNamespace(name="p", pipeline_prefix="p/", stopping=False, config={"delivery.timeout.ms": 6000, "request.timeout.ms": 3000})
    return ProducerWatchdog(producer)


@pytest.mark.parametrize(("cause", "named"), [
    (KILLED, True),  # killed mid-stream: a death the pipeline did not ask for
    (CLOSED, False),  # closed itself, as the producer closed
])
def test_a_killed_broker_worker_is_named_and_a_closed_one_is_not(monkeypatch, cause, named):
    import ray._private.state

    monkeypatch.setattr(ray._private.state, "actors", lambda: _table(cause))
    dog = _dog()
    dog._scan_actors()
    assert (dog.dead == {"p/broker_worker-111-1": "killed by ray.kill"}) is named, dog.dead
    assert (dog.dead_names("broker_worker") == ["p/broker_worker-111-1"]) is named
    message = dog._message(9)
    assert ("p/broker_worker-111-1" in message) is named and ("every producer actor is alive" in message) is not named


def test_a_living_broker_worker_is_not_named(monkeypatch):
    import ray._private.state

    monkeypatch.setattr(ray._private.state, "actors", lambda: _table("", state="ALIVE"))
    dog = _dog()
    dog._scan_actors()
    assert dog.dead == {}
