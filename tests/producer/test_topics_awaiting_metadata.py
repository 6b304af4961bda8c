"""The TopicDispatcher's hold for topics whose partition count cannot be looked up, without Ray."""

from __future__ import annotations

from raykafka.actors.batch import FIN, MessageBatch
from raykafka.actors.hold import split_expired
from raykafka.actors.topic_dispatcher import TopicsAwaitingMetadata, lookup_can_wait
from raykafka.wire.errors import (
    AuthenticationError,
    BrokerConnectionError,
    BrokerError,
    DeliveryTimeoutError,
    OutcomeUnknownError,
    UnknownTopicError,
)


def msg(name: str, created_ms: int, topic: str = "t") -> MessageBatch:
    return MessageBatch(topic=topic, ids=[hash(name)], values=[name.encode()], created_ms=created_ms)


def names(batches: list[MessageBatch]) -> list[bytes]:
    return [b.values[0] for b in batches]


def test_held_batches_come_back_in_the_order_they_came_per_topic():
    awaiting = TopicsAwaitingMetadata(delivery_timeout_ms=1000)
    down = BrokerConnectionError("no bootstrap server reachable")
    awaiting.hold("t", [msg("a", 1)], down)
    awaiting.hold("u", [msg("x", 1, "u")], down)
    awaiting.hold("t", [msg("b", 2), msg("c", 3)], down)
    assert awaiting.holds("t") and awaiting.holds("u") and awaiting
    assert names(awaiting.release("t")) == [b"a", b"b", b"c"]
    assert not awaiting.holds("t") and awaiting.holds("u")
    assert names(awaiting.take_all()) == [b"x"] and not awaiting


def test_expiry_fails_only_those_past_delivery_timeout_naming_the_last_cause():
    awaiting = TopicsAwaitingMetadata(delivery_timeout_ms=1000)
    awaiting.hold("t", [msg("old", 1000), msg("new", 1900)], BrokerConnectionError("no bootstrap server reachable"))
    assert awaiting.next_deadline_ms("t") == 2000
    assert awaiting.expire("t", now_ms=1500) == []
    [(expired, error)] = awaiting.expire("t", now_ms=2500)
    assert names(expired) == [b"old"]
    assert type(error) is DeliveryTimeoutError and not error.possibly_written
    assert "delivery.timeout.ms=1000" in str(error) and "'t'" in str(error)
    assert "no bootstrap server reachable" in str(error)
    assert names(awaiting.release("t")) == [b"new"]


def test_a_cut_short_lookup_keeps_the_cause_before_it():
    awaiting = TopicsAwaitingMetadata(delivery_timeout_ms=1000)
    awaiting.hold("t", [msg("a", 1000)], BrokerConnectionError("no bootstrap server reachable"))
    awaiting.failed_again("t", TimeoutError())
    [(_, error)] = awaiting.expire("t", now_ms=5000)
    assert "no bootstrap server reachable" in str(error)
    assert not awaiting


def test_a_held_batch_a_request_may_have_written_times_out_as_outcome_unknown():
    """A retried batch whose request went unanswered (or a heal's resend) may be in the log: its
    time running out while no metadata comes must not call it "not delivered"."""
    awaiting = TopicsAwaitingMetadata(delivery_timeout_ms=1000)
    sent = msg("sent", 1000)
    sent.possibly_written = True
    awaiting.hold("t", [msg("a", 1000), sent, msg("b", 1000)], BrokerConnectionError("no bootstrap server reachable"))
    (fresh, not_delivered), (written, unknown) = awaiting.expire("t", now_ms=2500)
    assert names(fresh) == [b"a", b"b"] and not not_delivered.possibly_written
    assert names(written) == [b"sent"]
    assert isinstance(unknown, OutcomeUnknownError) and unknown.possibly_written
    assert "outcome unknown" in str(unknown) and "no bootstrap server reachable" in str(unknown)


def test_split_expired_keeps_control_batches_and_order():
    fin = MessageBatch.control("t", 0, FIN)
    held = [msg("a", 1000), fin, msg("b", 0), msg("c", 5000)]
    kept, expired = split_expired(held, now_ms=4000, delivery_timeout_ms=1000)
    assert names(expired) == [b"a"]
    assert kept[0] is fin and names(kept[1:]) == [b"b", b"c"]
    assert split_expired(held, now_ms=9999, delivery_timeout_ms=None) == (held, [])


def test_only_errors_that_can_pass_are_waited_out():
    assert lookup_can_wait(BrokerConnectionError("down"))
    assert lookup_can_wait(TimeoutError())
    assert lookup_can_wait(BrokerError(5, "metadata for topic 't'"))  # LEADER_NOT_AVAILABLE
    assert not lookup_can_wait(UnknownTopicError("topic 't' does not exist"))
    assert not lookup_can_wait(AuthenticationError("bad password"))


def test_at_close_a_held_batch_that_may_be_written_says_so():
    from raykafka.actors.hold import closed_groups
    from raykafka.wire.errors import ProducerClosedError

    sent = msg("sent", 1)
    sent.possibly_written = True
    (fresh, closed), (written, unknown) = closed_groups([msg("a", 1), sent], "its topic's metadata")
    assert names(fresh) == [b"a"] and type(closed) is ProducerClosedError
    assert names(written) == [b"sent"] and isinstance(unknown, OutcomeUnknownError)
    assert "its topic's metadata" in str(closed) and "may have written it" in str(unknown)
