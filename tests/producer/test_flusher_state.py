"""The Flusher's produce-response table and in-flight ledger (`FlusherState`), without Ray."""

from __future__ import annotations

from types import SimpleNamespace

from raykafka.actors.batch import FIN, RESET, MessageBatch
from raykafka.actors.flusher_state import (
    Chaser,
    FlusherState,
    HeldBatches,
    InFlightRequest,
    ProduceAnswer,
)
from raykafka.wire.errors import (
    BY_NAME,
    BrokerError,
    DeliveryTimeoutError,
    OutcomeUnknownError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownOffsetError,
)

NONE = BY_NAME["NONE"].code
NOT_LEADER = BY_NAME["NOT_LEADER_OR_FOLLOWER"].code
INVALID_RECORD = BY_NAME["INVALID_RECORD"].code
OUT_OF_ORDER = BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
TOO_LARGE = BY_NAME["MESSAGE_TOO_LARGE"].code
DUPLICATE = BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code
TP = ("t", 0)


def state(max_retries: int = 3, delivery_timeout_ms: int = 120_000) -> FlusherState:
    return FlusherState("producer/broker/1", max_retries=max_retries, delivery_timeout_ms=delivery_timeout_ms)


def batch(n: int = 2, *, producer_id: int = -1, base_sequence: int = -1, retries: int = 0) -> MessageBatch:
    return MessageBatch(topic="t", partition=0, ids=list(range(n)), values=[b"v%d" % i for i in range(n)],
                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                        base_sequence=base_sequence, retries=retries)


def test_a_written_batch_is_delivered_at_its_offset_and_remembered_for_look_ups():
    s = state()
    b = batch(3, producer_id=7, base_sequence=10)
    s.handle_response(0, [b], {TP: ProduceAnswer(NONE, 40, 1234)}, {})
    (outcome,), (span,) = s.take_results()
    assert (outcome.topic, outcome.partition, outcome.first_offset, outcome.append_ms, outcome.error) == \
        ("t", 0, 40, 1234, None)
    assert (span.producer_id, span.base, span.count) == (7, 10, 3)
    assert s.lookup_start(batch(1, producer_id=7, base_sequence=13)) == 43  # after the acked batch
    assert s.lookup_start(batch(1, producer_id=8, base_sequence=13)) == 0  # another producer id
    assert s.take_retries() == [] and s.take_results() == ([], [])


def test_written_without_an_offset_needs_a_look_up_and_takes_what_it_found():
    s = state()
    answer = ProduceAnswer(DUPLICATE, -1)
    assert s.needs_lookup(answer) and not s.needs_lookup(ProduceAnswer(NONE, 5)) and not s.needs_lookup(None)
    found, lost = batch(), batch()
    lost.partition = 1
    s.handle_response(0, [found, lost], {TP: answer, ("t", 1): answer},
                      {TP: 77, ("t", 1): UnknownOffsetError("not found")})
    outcomes, _ = s.take_results()
    assert [(o.partition, o.first_offset, type(o.error).__name__) for o in outcomes] == \
        [(0, 77, "NoneType"), (1, -1, "UnknownOffsetError")]


def test_a_retriable_error_mutes_the_partition_and_retries_the_batch_counted():
    s = state()
    s.handle_response(4, [batch()], {TP: ProduceAnswer(NOT_LEADER)}, {})
    (retried,) = s.take_retries()
    assert retried.retries == 1 and TP in s.muter
    assert s.take_results() == ([], [])


def test_an_unanswered_partition_and_a_fatal_error_fail_with_the_cause():
    s = state()
    s.handle_response(0, [batch()], {TP: ProduceAnswer(INVALID_RECORD, error_message="bad")}, {})
    (outcome,), _ = s.take_results()
    assert isinstance(outcome.error, BrokerError) and outcome.error.code == INVALID_RECORD
    assert "bad" in str(outcome.error)


def test_a_partition_the_answer_leaves_out_may_be_written_and_ends_as_outcome_unknown():
    """A Produce answer that names another partition only: the broker may have appended this one
    all the same, so it is retried as possibly written and, its retries spent, ends as "outcome
    unknown", naming what was wrong with the answer."""
    s = state(max_retries=1)
    s.handle_response(0, [batch()], {("t", 1): ProduceAnswer(0, 5)}, {})
    (retried,) = s.take_retries()
    assert retried.possibly_written
    s.handle_response(1, [retried], {}, {})
    (outcome,), _ = s.take_results()
    assert isinstance(outcome.error, OutcomeUnknownError), repr(outcome.error)
    assert "left the partition out" in str(outcome.error)


def test_in_a_transaction_a_failed_batch_names_what_it_makes_of_the_transaction():
    """Java's handleFailedBatch: fenced is fatal (`ProducerFencedError`), another error abortable."""
    s = FlusherState("producer/broker/1", max_retries=3, delivery_timeout_ms=120_000, transactional=True)
    fenced, invalid = batch(producer_id=7, base_sequence=0), batch(producer_id=7, base_sequence=0)
    invalid.partition = 1
    s.handle_response(0, [fenced, invalid], {TP: ProduceAnswer(BY_NAME["PRODUCER_FENCED"].code),
                                             ("t", 1): ProduceAnswer(INVALID_RECORD)}, {})
    outcomes, _ = s.take_results()
    assert [type(o.error) for o in outcomes] == [ProducerFencedError, TransactionAbortableError]
    assert "produce to t/0" in str(outcomes[0].error) and outcomes[1].error.name == "INVALID_RECORD"


def test_a_broken_sequence_sends_a_reset_ahead_of_the_retry():
    s = state()
    s.handle_response(0, [batch(producer_id=7, base_sequence=4)], {TP: ProduceAnswer(OUT_OF_ORDER)}, {})
    reset, retried = s.take_retries()
    assert reset.flags & RESET and (reset.producer_id, reset.base_sequence) == (7, 4)
    assert retried.retries == 1 and not retried.is_control


def test_too_large_cuts_the_batch_in_two_halves_not_counted_as_retries():
    s = state(max_retries=0)
    s.handle_response(0, [batch(4)], {TP: ProduceAnswer(TOO_LARGE)}, {})
    halves = s.take_retries()
    assert [h.values for h in halves] == [[b"v0", b"v1"], [b"v2", b"v3"]]
    assert s.take_results() == ([], [])
    s.handle_response(1, [batch(1)], {TP: ProduceAnswer(TOO_LARGE)}, {})  # one record: fails
    (outcome,), _ = s.take_results()
    assert outcome.error.code == TOO_LARGE


def test_retries_end_at_the_limit_and_at_delivery_timeout():
    s = state(max_retries=2, delivery_timeout_ms=1000)
    s.retry_message(batch(retries=2), BrokerError(NOT_LEADER, "x"))
    (outcome,), _ = s.take_results()
    assert outcome.error.code == NOT_LEADER
    old = batch()
    old.created_ms = 1000
    s.retry_message(old, BrokerError(NOT_LEADER, "x"), now_ms=2500)
    (outcome,), _ = s.take_results()
    assert isinstance(outcome.error, DeliveryTimeoutError) and "NOT_LEADER_OR_FOLLOWER" in str(outcome.error)


def test_a_batch_a_request_of_which_went_unanswered_ends_with_its_outcome_unknown():
    """A request that got no answer (a dropped connection, a timeout) may have been written:
    when its batch is given up (past delivery.timeout.ms, or at the retry limit) the error says
    so (`possibly_written`). One only ever refused by the broker is not in the log."""
    from raykafka.wire.errors import OutcomeUnknownError

    s = state(max_retries=5, delivery_timeout_ms=1000)
    lost = batch()
    lost.created_ms = 1
    s.handle_failure(0, [lost], BrokerError(NOT_LEADER, "the connection dropped"))
    (outcome,), _ = s.take_results()
    assert isinstance(outcome.error, OutcomeUnknownError) and outcome.error.possibly_written
    assert "outcome unknown" in str(outcome.error)
    refused = batch()
    refused.created_ms = 1
    s.retry_message(refused, BrokerError(NOT_LEADER, "x"))
    (outcome,), _ = s.take_results()
    assert type(outcome.error) is DeliveryTimeoutError and not outcome.error.possibly_written
    s = state(max_retries=0)
    s.handle_failure(1, [batch()], BrokerError(NOT_LEADER, "timed out"))
    (outcome,), _ = s.take_results()
    assert isinstance(outcome.error, OutcomeUnknownError) and isinstance(outcome.error.__cause__, BrokerError)


def test_an_answer_that_says_the_leader_appended_it_marks_the_batch_possibly_written():
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND (and a broker's REQUEST_TIMED_OUT, waiting for its
    replicas) are retried, but the leader may have the batch: past its time it is outcome unknown."""
    from raykafka.wire.errors import OutcomeUnknownError

    for name in ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT"):
        s = state(delivery_timeout_ms=1000)
        appended = batch()
        appended.created_ms = 1
        s.handle_response(0, [appended], {TP: ProduceAnswer(BY_NAME[name].code)}, {})
        (outcome,), _ = s.take_results()
        assert isinstance(outcome.error, OutcomeUnknownError) and name in str(outcome.error), name
    s = state(delivery_timeout_ms=1000)
    refused = batch()
    refused.created_ms = 1
    s.handle_response(0, [refused], {TP: ProduceAnswer(NOT_LEADER)}, {})
    (outcome,), _ = s.take_results()
    assert type(outcome.error) is DeliveryTimeoutError


def test_the_in_flight_ledger_holds_typed_entries_in_request_order():
    s = state()
    future = SimpleNamespace(done=lambda: True)
    fin = MessageBatch.control("t", 0, FIN)
    s.in_flight.append(InFlightRequest(0, future, [batch()]))
    s.in_flight.append(s.not_sent(1, [batch()], BrokerError(NOT_LEADER, "x")))
    s.in_flight.append(Chaser(2, fin))
    assert s.requests_in_flight() and s.next_answered()
    s.in_flight.popleft()
    held = s.in_flight.popleft()
    assert isinstance(held, HeldBatches) and TP in s.muter
    s.retry_held(held)
    s.chaser_back(s.in_flight.popleft())
    assert TP not in s.muter  # the chaser came after request 1, whose failure muted it
    assert [b.is_control for b in s.take_retries()] == [False, True]
    assert not s.requests_in_flight() and not s.next_answered()


def test_with_retries_0_a_half_held_behind_its_sibling_s_cut_is_not_failed():
    """retries=0: the first half of a cut batch is refused as too large again and cut again; the
    second half, held behind it (one in flight), goes round too, not failed as a spent retry.
    Behind a failure the same batch is a retry and fails with the failure's cause."""
    s = state(max_retries=0)
    first, second = batch(4, retries=1), batch(4, retries=1)  # the halves of a cut batch
    s.handle_response(3, [first], {TP: ProduceAnswer(TOO_LARGE)}, {})
    s.retry_held(HeldBatches(4, s.muter.hold([second])))
    assert [len(b) for b in s.take_retries()] == [2, 2, 4]  # the first's quarters, then the second
    assert s.take_results() == ([], [])

    s = state(max_retries=0)
    s.handle_response(3, [batch()], {TP: ProduceAnswer(NOT_LEADER)}, {})
    s.retry_held(HeldBatches(4, s.muter.hold([second])))
    outcomes, _ = s.take_results()
    assert [type(o.error).__name__ for o in outcomes] == ["BrokerError", "BrokerError"]
    assert all(o.error.code == NOT_LEADER for o in outcomes)


def test_a_batch_held_behind_a_cut_counts_if_its_partition_failed_before_it_meanwhile():
    """Request 3 is cut and request 5's batch is held behind the cut; then request 4, before
    it, fails NOT_LEADER: the held batch goes round as a retry of that failure (retries=0: it fails)."""
    s = state(max_retries=0)
    held = batch(2, retries=0)
    s.handle_response(3, [batch(4)], {TP: ProduceAnswer(TOO_LARGE)}, {})
    entry = HeldBatches(5, s.muter.hold([held]))
    s.handle_response(4, [batch()], {TP: ProduceAnswer(NOT_LEADER)}, {})
    s.retry_held(entry)
    outcomes, _ = s.take_results()
    assert [(len(o.ids), o.error.code) for o in outcomes] == [(2, NOT_LEADER), (2, NOT_LEADER)]
    assert [len(b) for b in s.take_retries()] == [2, 2]  # only the cut's halves go round


def test_a_cut_spends_none_of_the_retries():
    """retries=1: the halves of a cut batch still have their one retry for a failure of their own."""
    s = state(max_retries=1)
    s.handle_response(3, [batch(4)], {TP: ProduceAnswer(TOO_LARGE)}, {})
    first, second = s.take_retries()
    assert (first.retries, first.spent_retries) == (1, 0)
    s.handle_response(5, [first], {TP: ProduceAnswer(NOT_LEADER)}, {})
    (again,) = s.take_retries()  # its one retry
    assert (again.retries, again.spent_retries) == (2, 1) and s.take_results() == ([], [])
    s.handle_response(6, [again], {TP: ProduceAnswer(NOT_LEADER)}, {})
    (outcome,), _ = s.take_results()
    assert outcome.error.code == NOT_LEADER and s.take_retries() == []

