"""`close()` with an actor of the pipeline just killed (ray.kill): the producer heals, so close
delivers everything, in bounded time, without raising, and leaves no actor of any of its
pipelines alive. On tansu, with Java's delivery.timeout.ms (120 s), so that the driver's
watchdog is not what ends the messages."""

from __future__ import annotations

import time

import pytest
import ray

from raykafka.driver.admin import Admin
from raykafka.driver.producer import Producer

from ..tiers import default_keeps

pytestmark = [pytest.mark.broker, pytest.mark.ray, pytest.mark.timeout(300)]

ROLES = ["topic_dispatcher", "partition_dispatcher", "leader_dispatcher", "broker_worker", "retry_handler"]


# the default tier keeps the death of the stage that holds messages in flight
@pytest.mark.parametrize("role", default_keeps(ROLES, kept=["broker_worker"]))
def test_close_with_a_dead_actor_heals_delivers_everything_and_leaves_no_actor(
        ray_session, bootstrap, topic_name, live_actors, kill_actor, role):
    topic, fresh = topic_name("deadclose"), topic_name("deadclose-new")
    with Admin(bootstrap) as admin:
        admin.create_topics({topic: 2, fresh: 2})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "delivery.timeout.ms": 120_000})
    before = [producer.send(topic, b"before-%d" % i) for i in range(200)]
    assert producer.flush(60) == 0 and all(f.result(0).offset >= 0 for f in before)
    (name,) = [n for n in ray.util.list_named_actors() if n.startswith(f"{producer.name}/{role}")]
    killed = kill_actor(name)
    # a topic already written goes straight to its dispatcher: the TopicDispatcher is met only
    # by a topic's first messages, so with it dead the messages go to a topic not written yet
    target = fresh if role == "topic_dispatcher" else topic
    after = [producer.send(target, b"after-%d" % i) for i in range(200)]
    batch = producer.send_batch(target, [b"batch-%d" % i for i in range(50)])

    start = time.monotonic()
    producer.close()
    took = time.monotonic() - start

    assert took < 40, f"close took {took:.1f}s"
    assert all(f.done() for f in after) and batch.done()
    assert [f.exception(0) for f in after if f.exception(0) is not None] == []
    assert batch.result(0).ok, [e for e in batch.result(0).errors if e is not None][:3]
    assert producer.healed >= 1, f"{killed} died and nothing healed"
    assert live_actors(producer.name) == []
