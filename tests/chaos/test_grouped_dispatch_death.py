"""The PartitionDispatcher dies in the middle of one grouped dispatch, on the scripted mock
cluster (one broker), through the real Ray pipeline.

The TopicDispatcher takes the first batches of three new topics in one call, and forwards them
topic by topic: it looks each up (Metadata, then `add_topic` on the PartitionDispatcher) and hands
its batches on. Topic A is forwarded and written; the broker holds the Metadata answer for topic B,
so the TopicDispatcher waits there; topic C is not reached. The PartitionDispatcher is killed
then, and B's answer let go: `add_topic` for B meets the dead actor and the call stops half done,
with A forwarded and B and C not. The driver's call fails with the death, the producer heals,
and the new pipeline sends B and C (and anything of A not yet answered) again: every message ends
once, delivered at the offset the log holds it, none lost, doubled or reordered.

Why the mock: only a scripted broker can hold one topic's Metadata answer while another topic's
Produce goes through, which is what pins the death between two topics of one call. The
watchdog's look at the actor table is switched off for the test, so the heal can only be asked
for by the failed calls themselves: the path under test, not the safety net beside it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from raykafka.driver import producer_watchdog
from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster
from raykafka.wire import messages

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

WARM, A, B, C = "gd-warm", "gd-a", "gd-b", "gd-c"
PARTITIONS = 3
PER_TOPIC = 100
LINGER_MS = 1000
HOLD_S = 60.0  # the longest the held Metadata answer waits for the test (it is let go at once)


class HeldMetadata:
    """Metadata requests naming `topic` wait, unanswered, until `release()`; the others are
    answered at once. Asynchronous, so that the broker goes on answering the other connections
    (the held one is the TopicDispatcher's own)."""

    def __init__(self, cluster: MockCluster, topic: str):
        self.topic = topic
        self.default = cluster.default_handlers[messages.METADATA.key]
        self.released = threading.Event()
        self.held = 0  # requests naming the topic that waited
        self.answered_held = 0  # of those, answered after the release

    def release(self) -> None:
        self.released.set()

    async def __call__(self, version, body, broker):
        names = [t.name for t in body.topics or []]
        if self.topic in names and not self.released.is_set():
            self.held += 1
            await asyncio.to_thread(self.released.wait, HOLD_S)
            self.answered_held += 1
        return self.default(version, body, broker)


def _produced_topics(cluster: MockCluster) -> set[str]:
    """The topics of every Produce request the mock took."""
    return {t.name for body in cluster.requests(messages.PRODUCE) for t in body.topic_data}


def test_a_death_between_two_topics_of_one_dispatch_heals_every_message_once(
        ray_session, kit, ledger, record, live_actors, monkeypatch):
    """Mock cluster, one broker; idempotence on. A warm-up on a topic of its own; then 100 keyed
    messages to each of three new topics A, B, C, handed on together (one TopicDispatcher call).
    B's Metadata answer is held: A's messages are written while the call waits in B's look-up.
    The PartitionDispatcher is killed, B's answer let go: the call fails at B's `add_topic`. The
    producer heals once, and every message of A, B and C is delivered once, in order per key."""
    # the heal can only come from the calls that meet the dead actor, not from the actor table
    monkeypatch.setattr(producer_watchdog, "ACTOR_SCAN", float("inf"))
    topics = {WARM: PARTITIONS, A: PARTITIONS, B: PARTITIONS, C: PARTITIONS}
    with MockCluster(n_brokers=1, topics=topics) as cluster:
        hold = HeldMetadata(cluster, B)
        cluster.set_handler(messages.METADATA, hold)
        # linger.ms 1 s: the three topics' messages, sent within it, are handed on by the flush
        # below, in one go (the pipeline's own lingering costs the test a second before and after)
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": LINGER_MS, "request.timeout.ms": 15_000,
                  "delivery.timeout.ms": 60_000, "enable.idempotence": True}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        first_prefix = producer.pipeline_prefix
        try:
            # the pipeline up, and WARM's route taken (the second goes straight to the
            # PartitionDispatcher): no answer is left to wake the sender during the sends below
            for value in (b"warm-up", b"warm-up-2"):
                warm = producer.send(WARM, value)
                assert producer.flush(60) == 0 and warm.result(0).offset >= 0
            warm_ups = ledger.callbacks
            assert hold.held == 0, "nothing asked about B before its messages"
            t0 = time.monotonic()
            for topic in (A, B, C):
                for i in range(PER_TOPIC):
                    ledger.send(producer, topic, b"%s-v%04d" % (topic.encode(), i), key=b"k%02d" % (i % 7))
            sends_took = time.monotonic() - t0
            assert producer.flush(0) == 3 * PER_TOPIC  # handed on now, all together
            # in one hand-over, so in one TopicDispatcher call: none lingered past linger.ms
            assert sends_took < LINGER_MS / 1000 / 2, f"the sends took {sends_took:.2f} s"
            # mid-dispatch: A forwarded and written, the call waiting in B's look-up, C not reached
            kit.wait_for(lambda: hold.held == 1, timeout=30, what="the look-up of B held")
            kit.wait_for(lambda: all(f.done() for f in ledger.futures[:PER_TOPIC]), timeout=30,
                         what="A's messages delivered while B's look-up is held")
            assert [f.exception(0) for f in ledger.futures[:PER_TOPIC]] == [None] * PER_TOPIC
            produced_before = _produced_topics(cluster)
            assert A in produced_before and not {B, C} & produced_before, produced_before
            assert not any(f.done() for f in ledger.futures[PER_TOPIC:]), "B and C wait behind B's look-up"
            killed = kit.kill_by_role(first_prefix, "partition_dispatcher")
            hold.release()
            figures = ledger.settle(timeout=90)
            elapsed = time.monotonic() - t0
            kit.wait_for(lambda: producer.heals_done, timeout=30, what="the heal ended")
        finally:
            hold.release()
            producer.close(30)
        by_topic = {t: {p: [(r.offset, r.value) for r in cluster.records(t, p)] for p in range(PARTITIONS)}
                    for t in (A, B, C)}
        handler_errors = list(cluster.handler_errors)
    heals = kit.heal_figures(producer)
    checks = {t: ledger.check_log(by_topic[t], only=range(i * PER_TOPIC, (i + 1) * PER_TOPIC))
              for i, t in enumerate((A, B, C))}
    record(**figures, checks=checks, actors_killed=[killed], heals=heals, seconds=round(elapsed, 1),
           callbacks=ledger.callbacks - warm_ups, sends_took_s=round(sends_took, 3), heal_cause=producer.heals_done[0].cause)

    # the scenario happened: B's look-up was held once and answered after the kill, and the heal
    # was asked for by a call that met the dead PartitionDispatcher (the watchdog did not look)
    assert hold.held == 1 and hold.answered_held == 1
    assert producer.healed == 1, producer.heals_done
    cause = producer.heals_done[0].cause
    assert cause.startswith(f"producer actor {first_prefix}partition_dispatcher died"), cause
    assert heals[0]["sent_again"] == 2 * PER_TOPIC and heals[0]["found_in_log"] == 0, heals
    # every message ends once, delivered, at the offset the log holds it
    assert figures["unresolved"] == 0 and figures["failed"] == 0, figures["failed_by_cause"]
    assert ledger.callbacks - warm_ups == len(ledger.values), "each message ends exactly once"
    assert sorted(ledger.delivered) == list(range(3 * PER_TOPIC))
    for topic, check in checks.items():
        assert check == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0,
                         "without_offset": 0}, (topic, check)
    written = sorted(value for log in by_topic.values() for entries in log.values() for _, value in entries)
    assert written == sorted(ledger.values), "each message written once, nothing else"
    assert elapsed < 60, f"{elapsed:.1f} s from the sends to every message ended"
    assert handler_errors == []
    assert live_actors(producer.name) == []
