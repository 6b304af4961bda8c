"""A heal whose resends cannot be delivered in time, on the scripted mock cluster (one broker):
what the dead pipeline left unanswered and the heal sent again ends as "outcome unknown"
(`OutcomeUnknownError`) when its delivery.timeout.ms runs out in the new pipeline, never as
"not delivered" (`DeliveryTimeoutError`): a request of the dead pipeline may still land, so the
producer cannot say it is not in the log. Messages sent only after the heal, which the broker
refuses as unwritten until their time runs out, end as "not delivered".

Why the mock: the heal must be able to start its new pipeline (Metadata, InitProducerId, the
log read answered) while no Produce is ever written. The broker first holds the Produce requests
unanswered (in flight when the BrokerWorker is killed), then refuses every one with
NOT_ENOUGH_REPLICAS (retriable, not appended). A refused batch is retried, never in a request
the broker may have written, so in the new pipeline only the heal's own mark
(`MessageBatch.possibly_written`) tells its resends from the fresh messages when they time out
side by side in the same partitions."""

from __future__ import annotations

import time

import pytest

from raykafka.driver.producer import Producer
from raykafka.mock import MockCluster
from raykafka.wire import messages
from raykafka.wire.errors import BY_NAME, DeliveryTimeoutError, OutcomeUnknownError
from raykafka.wire.record_decoding import decode_record_batches

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

TOPIC = "healtimeout"
PARTITIONS = 6
DELIVERY_MS = 20_000  # the new pipeline up inside it, on a loaded 2-core machine too
NOT_ENOUGH_REPLICAS = BY_NAME["NOT_ENOUGH_REPLICAS"].code


def _values_in_requests(cluster: MockCluster, since: int) -> set[bytes]:
    """The values of every record in the Produce requests the mock took, from the `since`-th on."""
    out: set[bytes] = set()
    for body in cluster.requests(messages.PRODUCE)[since:]:
        for t in body.topic_data:
            for pd in t.partition_data:
                out.update(r.value for b in decode_record_batches(pd.records or b"") for r in b.records)
    return out


@pytest.mark.slow  # 28 s; the default tier keeps the mark (tests/unit) and the batching (tests/producer)
def test_a_heals_resends_that_time_out_end_as_outcome_unknown(ray_session, kit, ledger, record, live_actors):
    """Mock cluster, one broker; idempotence on, delivery.timeout.ms 20 s. 300 messages
    delivered; 600 more sent while the broker holds every Produce unanswered; the BrokerWorker
    killed with them in flight and the broker then refusing every Produce (NOT_ENOUGH_REPLICAS,
    not written); the heal finds none in the log and sends all 600 again; 300 more sent after the
    heal. Each of the 600 ends as outcome unknown, by the new pipeline's time-out; each of the
    300 after as not delivered; each once, none written."""
    warm, resent, fresh = range(0, 300), range(300, 900), range(900, 1200)
    ended: dict[int, float] = {}  # send index -> when its future was set
    sent_at: dict[int, float] = {}

    def send(indexes: range) -> None:
        for i in indexes:
            sent_at[i] = time.monotonic()
            ledger.send(producer, TOPIC, b"v%07d" % i, key=b"k%03d" % (i % 97))
            ledger.futures[-1].add_done_callback(lambda _f, i=i: ended.setdefault(i, time.monotonic()))

    with MockCluster(n_brokers=1, topics={TOPIC: PARTITIONS}) as cluster:
        # linger.ms 1 s: the 600 are handed on together (by the flush below), in one or two Produce
        # requests, however slow the machine; many small ones would pass the 5 a connection holds
        config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 1000, "request.timeout.ms": 15_000,
                  "delivery.timeout.ms": DELIVERY_MS, "retry.backoff.ms": 500, "enable.idempotence": True}
        producer = Producer(config, on_delivery=ledger.on_delivery)
        try:  # the pipeline up first, outside the ledger: a cold start may take longer than 20 s
            kit.wait_for(lambda: producer.send(TOPIC, b"warm-up").exception(30) is None, timeout=120)
            send(warm)
            assert producer.flush(60) == 0  # its BrokerWorker is up; every callback made
            warm_ups = ledger.callbacks - len(warm)  # on_delivery heard of the warm-ups too
            since = len(cluster.requests(messages.PRODUCE))
            cluster.set_handler(messages.PRODUCE, lambda _version, _body, _broker: None)  # taken, never answered
            send(resent)
            assert producer.flush(0) == len(resent)  # handed on now, all together; none answered
            want = {ledger.values[i] for i in resent}
            kit.wait_for(lambda: want <= _values_in_requests(cluster, since), timeout=30,
                         what="every one of the 600 in a Produce request the broker holds")
            # from now on every Produce is refused, unwritten: nothing the new pipeline sends lands
            cluster.fail_next(messages.PRODUCE, NOT_ENOUGH_REPLICAS, 10**9)
            cluster.set_handler(messages.PRODUCE, None)
            killed = kit.kill_by_role(producer.pipeline_prefix, "broker_worker")
            kit.wait_for(lambda: producer.heals_done, timeout=30, what="the heal sent them again")
            healed_after_s = time.monotonic() - sent_at[resent[0]]
            # the new pipeline is up (its BrokerWorker is started on demand): what is sent now
            # is refused, unwritten, in a request of its own, until its time runs out
            kit.wait_for(lambda: cluster.faults.get("error/Produce/NOT_ENOUGH_REPLICAS", 0) > 0, timeout=60,
                         what="the new pipeline's first Produce")
            send(fresh)
            figures = ledger.settle(timeout=DELIVERY_MS / 1000 + 30)
        finally:
            producer.close(30)
        log = {p: [(r.offset, r.value) for r in cluster.records(TOPIC, p)] for p in range(PARTITIONS)}
        checks = ledger.check_log(log)
        refused = cluster.faults.get("error/Produce/NOT_ENOUGH_REPLICAS", 0)
    heals = kit.heal_figures(producer)
    record(**figures, **checks, actors_killed=[killed], heals=heals, healed_after_s=round(healed_after_s, 1),
           produce_refused=refused, callbacks=ledger.callbacks - warm_ups)

    assert producer.healed == 1
    assert heals[0]["found_in_log"] == 0 and heals[0]["sent_again"] == len(resent), heals
    assert refused > 0, "the new pipeline's Produce requests were refused"
    assert figures["unresolved"] == 0 and ledger.callbacks - warm_ups == len(ledger.values), "each ends once"
    assert sorted(ledger.delivered) == list(warm), figures["failed_by_cause"]
    assert checks == {"lost": 0, "duplicated": 0, "reordered": 0, "failed_but_written": 0, "without_offset": 0}
    written = [value for entries in log.values() for _, value in entries if value != b"warm-up"]
    assert sorted(written) == [ledger.values[i] for i in warm], "nothing but the first 300 written"
    # the heal's resends: outcome unknown, said by the new pipeline's time-out (not the watchdog's)
    unknown = [ledger.failed[i] for i in resent]
    assert all(type(e) is OutcomeUnknownError and e.possibly_written for e in unknown), \
        {kit.cause_of(e) for e in unknown}
    assert all(str(e).startswith("outcome unknown within delivery.timeout.ms=20000") for e in unknown), \
        sorted({str(e)[:160] for e in unknown})[:3]
    # sent after the heal, refused unwritten until their time ran out: not delivered
    not_delivered = [ledger.failed[i] for i in fresh]
    assert all(type(e) is DeliveryTimeoutError and not e.possibly_written for e in not_delivered), \
        {kit.cause_of(e) for e in not_delivered}
    assert all(str(e).startswith("not delivered within delivery.timeout.ms=20000") for e in not_delivered), \
        sorted({str(e)[:160] for e in not_delivered})[:3]
    # each failed by its time running out, within a bound of it. A record batch's time runs from
    # its oldest message (as the Java producer's does), and a burst's messages share batches
    # (linger.ms 1 s): a message may end before its own delivery.timeout.ms, never before its
    # burst's first message's
    for burst in (resent, fresh):
        since_burst = [ended[i] - sent_at[burst[0]] for i in burst]
        lived = [ended[i] - sent_at[i] for i in burst]
        assert DELIVERY_MS / 1000 <= min(since_burst) and max(lived) < DELIVERY_MS / 1000 + 30, \
            (min(since_burst), min(lived), max(lived))
    assert live_actors(producer.name) == []
