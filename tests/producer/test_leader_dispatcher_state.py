"""The leader dispatcher's retry state machine (Sarama's chaser protocol), without Ray."""

from __future__ import annotations

import time

from raykafka.actors.batch import FIN, RESET, SYN, MessageBatch
from raykafka.actors.hold import Wake
from raykafka.actors.leader_dispatcher import (
    DEADLINE_SLACK_S,
    HoldBackoff,
    LeaderDispatcherState,
    LeftBrokers,
    PartitionTimers,
    fail_waiting,
    seconds_to_deadline,
)
from raykafka.wire.errors import BrokerError, DeliveryTimeoutError, OutcomeUnknownError, ProducerClosedError


class FakeBackend:
    """Records what the state machine does: sends per broker path, abandons, errors."""

    def __init__(self, fail_leader: int = 0):
        self.path = 0  # which selection we are on
        self.sent: list[tuple[int, str]] = []
        self.abandoned = 0
        self.errors: list[tuple[list, Exception]] = []
        self.fail_leader = fail_leader

    def update_leader(self) -> None:
        if self.fail_leader:
            self.fail_leader -= 1
            raise BrokerError(5, "t/0")
        self.path += 1

    def send(self, batch: MessageBatch) -> None:
        if batch.flags & SYN:
            self.sent.append((self.path, "syn"))
        elif batch.flags & FIN:
            self.sent.append((self.path, f"fin{batch.retries}"))
        else:
            self.sent.append((self.path, batch.values[0].decode()))

    def abandon(self) -> None:
        self.abandoned += 1

    first_unresolved_sequence = 0

    def first_unresolved(self, producer_id: int, numbering: int) -> int:
        return self.first_unresolved_sequence

    def return_errors(self, batches, error) -> None:
        self.errors.append(([b.values[0] for b in batches], error))

    def data(self) -> list[str]:
        return [name for _, name in self.sent if name != "syn" and not name.startswith("fin")]


def msg(name: str, retries: int = 0) -> MessageBatch:
    return MessageBatch(topic="t", ids=[hash(name)], values=[name.encode()], retries=retries, partition=0)


def chaser(retries: int) -> MessageBatch:
    return MessageBatch.control("t", 0, FIN, retries=retries)


def test_normal_operation_passes_through_in_order_with_one_syn():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend)
    for name in ("a", "b", "c"):
        state.dispatch(msg(name))
    assert backend.sent == [(1, "syn"), (1, "a"), (1, "b"), (1, "c")]
    assert state.retry_level == 0 and not state.levels


def test_a_retry_raises_the_high_watermark_chases_the_old_path_and_buffers_new_messages():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend)
    state.dispatch(msg("a"))
    state.dispatch(msg("a", retries=1))  # "a" failed on path 1 and came back
    assert state.retry_level == 1
    # the chaser went down the OLD path (1), then the broker was abandoned, then a new path opened
    assert backend.sent[-3:] == [(1, "fin0"), (2, "syn"), (2, "a")]
    assert backend.abandoned == 1
    state.dispatch(msg("b"))  # new message: must wait behind the retried ones
    state.dispatch(msg("x", retries=1))  # another retried message passes
    assert backend.data() == ["a", "a", "x"]
    assert [b.values[0] for b in state.levels[0].buf] == [b"b"]
    # the backlog is released only when the chaser returns
    state.dispatch(chaser(1))
    assert backend.data() == ["a", "a", "x", "b"]
    assert state.retry_level == 0 and not state.levels


def test_several_retry_levels_in_flight_flush_in_order_as_each_chaser_returns():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend)
    state.dispatch(msg("a"))
    state.dispatch(msg("a", retries=1))  # level 1, fin0 on path 1
    state.dispatch(msg("b"))  # buffered at 0
    state.dispatch(msg("a", retries=2))  # failed again on path 2: level 2, fin1 on path 2
    assert state.retry_level == 2
    assert state.levels[1].expect_chaser and state.levels[2].expect_chaser
    state.dispatch(msg("c", retries=1))  # a level-1 straggler: buffered at 1
    state.dispatch(msg("d"))  # buffered at 0
    # the level-1 chaser returns (as retries=1 < hwm): clears the flag, flushes nothing yet
    state.dispatch(chaser(1))
    assert not state.levels[1].expect_chaser
    assert backend.data() == ["a", "a", "a"]
    # the level-2 chaser returns: level 1's buffer, then level 0's, in that order
    state.dispatch(chaser(2))
    assert backend.data() == ["a", "a", "a", "c", "b", "d"]
    assert state.retry_level == 0


def test_flushing_stops_at_a_level_still_waiting_for_its_chaser():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend)
    state.dispatch(msg("a"))
    state.dispatch(msg("a", retries=1))
    state.dispatch(msg("b"))  # buffered at 0
    state.dispatch(msg("a", retries=2))
    state.dispatch(msg("c", retries=1))  # buffered at 1
    state.dispatch(chaser(2))  # level 2 done, but level 1's chaser is still out
    assert state.retry_level == 1
    assert backend.data() == ["a", "a", "a", "c"]  # level 1's backlog went; level 0's waits
    assert [b.values[0] for b in state.levels[0].buf] == [b"b"]
    state.dispatch(chaser(1))
    assert backend.data()[-1] == "b" and state.retry_level == 0


def test_a_late_chaser_at_high_watermark_zero_is_dropped():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend)
    state.dispatch(msg("a"))
    state.dispatch(chaser(1))  # no retry level open: nothing happens
    assert backend.data() == ["a"] and state.retry_level == 0


def test_no_leader_holds_the_messages_in_order_until_a_refresh_finds_it():
    backend = FakeBackend(fail_leader=2)
    state = LeaderDispatcherState("t", 0, backend, delivery_timeout_ms=120_000)
    state.dispatch(msg("a"))  # the refresh fails: "a" waits
    state.dispatch(msg("b"))  # behind "a", without a refresh of its own
    assert backend.errors == [] and backend.sent == []
    assert state.retry_held(now_ms=0)  # the second refresh fails too: still waiting
    state.dispatch(msg("c"))
    assert not state.retry_held(now_ms=0)  # the leader is back
    assert backend.sent == [(1, "syn"), (1, "a"), (1, "b"), (1, "c")]
    state.dispatch(msg("d"))
    assert backend.data() == ["a", "b", "c", "d"] and backend.errors == []


def test_held_retries_and_chasers_keep_their_order_behind_the_retry_levels():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend, delivery_timeout_ms=120_000)
    state.dispatch(msg("a"))
    backend.fail_leader = 1
    state.dispatch(msg("a", retries=1))  # a new retry level, but no leader: held
    state.dispatch(msg("b"))
    state.dispatch(chaser(0))  # the old path's chaser comes back while the retry is held
    assert backend.data() == ["a"] and not state.retry_held(now_ms=0)
    # released in the order they came: the retry opens level 1, "b" waits there for the chaser
    assert backend.data() == ["a", "a"] and state.retry_level == 1
    state.dispatch(chaser(1))
    assert backend.data() == ["a", "a", "b"] and state.retry_level == 0


def test_held_messages_fail_naming_the_cause_once_delivery_timeout_runs_out():
    backend = FakeBackend(fail_leader=10)
    state = LeaderDispatcherState("t", 0, backend, delivery_timeout_ms=1000)
    old, new = msg("old"), msg("new")
    old.created_ms, new.created_ms = 1000, 1900
    state.dispatch(old)
    state.dispatch(new)
    assert state.retry_held(now_ms=2500)  # "old" is past its 1000 ms, "new" is not
    assert [names for names, _ in backend.errors] == [[b"old"]]
    error = backend.errors[0][1]
    assert isinstance(error, DeliveryTimeoutError)
    assert "delivery.timeout.ms=1000" in str(error) and "LEADER_NOT_AVAILABLE" in str(error)
    backend.fail_leader = 0
    assert not state.retry_held(now_ms=2600)
    assert backend.data() == ["new"]


def test_a_held_batch_the_broker_may_have_written_times_out_as_outcome_unknown():
    """A retry whose request went unanswered, held while no leader answers: its time running out
    must not call it "not delivered"."""
    backend = FakeBackend(fail_leader=10)
    state = LeaderDispatcherState("t", 0, backend, delivery_timeout_ms=1000)
    fresh, sent = msg("fresh"), msg("sent", retries=1)
    fresh.created_ms = sent.created_ms = 1000
    sent.possibly_written = True
    state.dispatch(fresh)
    state.dispatch(sent)
    assert not state.retry_held(now_ms=2500)
    (fresh_names, not_delivered), (sent_names, unknown) = backend.errors
    assert fresh_names == [b"fresh"] and type(not_delivered) is DeliveryTimeoutError
    assert sent_names == [b"sent"] and isinstance(unknown, OutcomeUnknownError)
    assert "LEADER_NOT_AVAILABLE" in str(unknown)


def waiting_behind_a_retry(delivery_timeout_ms: int = 1000) -> tuple[FakeBackend, LeaderDispatcherState]:
    """A partition at retry level 1 ("a" came back), its chaser still out."""
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend, delivery_timeout_ms=delivery_timeout_ms)
    state.dispatch(msg("a"))
    state.dispatch(msg("a", retries=1))
    assert state.retry_level == 1
    return backend, state


def test_new_batches_waiting_behind_a_retry_fail_as_not_delivered_at_their_deadline():
    backend, state = waiting_behind_a_retry()
    old, new, resent = msg("old"), msg("new"), msg("resent")
    old.created_ms, new.created_ms, resent.created_ms = 1000, 1900, 1200
    resent.possibly_written = True  # a heal's resend: a dead pipeline may have written it
    for batch in (old, resent, new):
        state.dispatch(batch)
    assert state.next_deadline_ms() == 2000
    state.expire_waiting(now_ms=2000)  # not past yet
    assert backend.errors == []
    state.expire_waiting(now_ms=2500)
    (old_names, not_delivered), (resent_names, unknown) = backend.errors
    assert old_names == [b"old"] and type(not_delivered) is DeliveryTimeoutError
    assert "behind a retry of t/0" in str(not_delivered) and "delivery.timeout.ms=1000" in str(not_delivered)
    assert resent_names == [b"resent"] and isinstance(unknown, OutcomeUnknownError)
    assert state.next_deadline_ms() == 2900
    state.dispatch(chaser(1))  # the chaser comes back: only what did not fail goes, in order
    assert backend.data() == ["a", "a", "new"] and state.retry_level == 0
    assert state.next_deadline_ms() is None


def test_a_retried_batch_waiting_behind_a_higher_level_keeps_the_drivers_bound():
    """A batch at retry level 1 was sent and numbered: failing it here would leave a gap in its
    partition's sequence and call something "not delivered" that may be in the log."""
    backend, state = waiting_behind_a_retry()
    state.dispatch(msg("a", retries=2))  # level 2
    straggler = msg("b", retries=1)
    straggler.created_ms = 1000
    state.dispatch(straggler)  # buffered at level 1
    assert state.next_deadline_ms() is None
    state.expire_waiting(now_ms=99_000)
    assert backend.errors == [] and [b.values[0] for b in state.levels[1].buf] == [b"b"]


def test_the_deadline_wake_comes_just_after_the_first_deadline_and_never_spins():
    backend, state = waiting_behind_a_retry()
    late = msg("late")
    late.created_ms = 5000
    state.dispatch(late)
    assert seconds_to_deadline([state], now_ms=5500) == 0.5 + DEADLINE_SLACK_S
    assert seconds_to_deadline([state], now_ms=9000) == DEADLINE_SLACK_S  # overdue: at once, not at 0
    assert seconds_to_deadline([LeaderDispatcherState("t", 1, backend, delivery_timeout_ms=1000)], 0) is None
    assert seconds_to_deadline([], now_ms=0) is None


def test_a_wake_armed_by_a_deadline_moves_up_never_back():
    calls: list[str] = []
    wake = Wake(lambda: lambda: calls.append("woke"))
    wake.arm_by(60)
    first = wake._timer
    wake.arm_by(120)  # later: the sooner wait stays
    assert wake._timer is first
    wake.arm_by(0.01)  # sooner: moved up
    assert wake._timer is not first and first.finished.is_set()  # the later wait was cancelled
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == ["woke"]
    wake.fired()
    assert not wake.armed
    wake.cancel()


def test_hold_backoff_doubles_up_to_its_cap_and_resets():
    backoff = HoldBackoff(100)
    assert [backoff.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.1


def test_idempotent_sequences_are_assigned_once_and_kept_on_retry():
    backend = FakeBackend()
    state = LeaderDispatcherState("t", 0, backend, producer_id=7, producer_epoch=0)
    first = MessageBatch(topic="t", ids=[1, 2, 3], values=[b"a", b"b", b"c"])
    second = MessageBatch(topic="t", ids=[4], values=[b"d"])
    state.dispatch(first)
    state.dispatch(second)
    assert (first.base_sequence, second.base_sequence) == (0, 3)
    first.retries = 1
    state.dispatch(first)  # a retry keeps its sequence
    assert first.base_sequence == 0 and state.next_sequence == 4


def test_a_broken_sequence_renumbers_from_zero_under_a_new_producer_id():
    backend = FakeBackend()
    backend.new_producer_id = lambda: (8, 0)
    state = LeaderDispatcherState("t", 0, backend, producer_id=7, producer_epoch=0)
    first = MessageBatch(topic="t", ids=[1, 2], values=[b"a", b"b"])
    state.dispatch(first)
    reset = MessageBatch.control("t", 0, RESET)
    reset.base_sequence = 0  # the first batch broke, and nothing before it is unresolved
    reset.producer_id = 6  # a stale reset (another id) changes nothing
    state.dispatch(reset)
    assert state.producer_id == 7
    reset.producer_id = 7
    state.dispatch(reset)
    assert (state.producer_id, state.next_sequence) == (8, 0)
    first.retries = 1  # it came back: numbered again under the new id
    state.dispatch(first)
    assert (first.producer_id, first.base_sequence, state.next_sequence) == (8, 0, 2)



def test_a_broken_sequence_behind_an_unresolved_batch_keeps_the_producer_id():
    """OUT_OF_ORDER_SEQUENCE for the second batch while the first has not ended: the first may
    yet be written (its answer was lost), so renumbering would write it twice. Keep the id; the
    second batch is retried and heals once the first lands."""
    backend = FakeBackend()
    backend.new_producer_id = lambda: (8, 0)
    state = LeaderDispatcherState("t", 0, backend, producer_id=7, producer_epoch=0)
    first = MessageBatch(topic="t", ids=[1, 2], values=[b"a", b"b"])
    second = MessageBatch(topic="t", ids=[3], values=[b"c"])
    state.dispatch(first)
    state.dispatch(second)
    reset = MessageBatch.control("t", 0, RESET)
    reset.producer_id, reset.base_sequence = 7, second.base_sequence
    backend.first_unresolved_sequence = 0  # the first batch is still out there
    state.dispatch(reset)
    assert (state.producer_id, state.numbering, state.next_sequence) == (7, 0, 3)
    backend.first_unresolved_sequence = 2  # the first batch ended: the broker lost the sequence
    state.dispatch(reset)
    assert (state.producer_id, state.numbering, state.next_sequence) == (8, 1, 0)
    reset.producer_id, reset.numbering = 7, 0
    state.dispatch(reset)  # a second report of the old numbering changes nothing more
    assert (state.producer_id, state.numbering) == (8, 1)


def test_a_transactional_sequence_broken_for_good_fails_the_partitions_batches_at_once():
    """A transactional producer's batch failed for good, leaving a gap: the next one is refused
    OUT_OF_ORDER_SEQUENCE with every batch before it ended. The producer cannot number anew
    under another id (init_transactions alone gives one). The first time, the batch is retried
    (the one before it may have landed meanwhile); refused so again, it and every later batch of
    the partition fail at once as abortable, naming the gap, rather than being refused until
    delivery.timeout.ms; the abort renews the epoch (driver/producer.py)."""
    from raykafka.actors.idempotence import NoNewProducerId
    from raykafka.wire.errors import TransactionAbortableError

    def no_new_id():
        raise NoNewProducerId("a transactional producer gets its producer id from init_transactions only")

    backend = FakeBackend()
    backend.new_producer_id = no_new_id
    state = LeaderDispatcherState("t", 0, backend, producer_id=7, producer_epoch=0)
    lost, after = msg("lost"), msg("after")
    state.dispatch(lost)  # sequence 0: it fails for good
    state.dispatch(after)  # sequence 1: refused, the broker still expects 0
    backend.first_unresolved_sequence = after.base_sequence  # every batch before it ended
    reset = MessageBatch.control("t", 0, RESET)
    reset.producer_id, reset.base_sequence = 7, after.base_sequence
    state.dispatch(reset)
    after.retries = 1
    state.dispatch(after)  # retried once, with its own numbers
    assert backend.errors == [] and backend.data() == ["lost", "after", "after"]
    state.dispatch(reset)  # refused again, nothing unresolved before it: the gap is real
    after.retries = 2
    state.dispatch(after)
    state.dispatch(msg("later"))  # new: it waits behind the retries, for their chasers
    state.dispatch(chaser(1))
    state.dispatch(chaser(2))
    assert [(values, type(error)) for values, error in backend.errors] == [
        ([b"after"], TransactionAbortableError), ([b"later"], TransactionAbortableError)]
    assert "sequence broke twice at 1" in str(backend.errors[0][1])
    assert backend.data() == ["lost", "after", "after"], "nothing more went to the broker"


class FakeCalls:
    """A `CallWindow`'s `drain`: `outstanding` calls left, each `drain` without a timeout waits them out."""

    def __init__(self, outstanding: int):
        self.outstanding = outstanding

    def drain(self, timeout: float | None = None) -> int:
        if timeout is None:
            self.outstanding = 0
        return self.outstanding


def test_a_broker_left_is_released_once_its_calls_have_returned_not_before():
    """Leaving a broker does not wait for its calls (the chaser's returns only once the old
    broker's queue is on the wire); its reference goes once they have all returned."""
    left = LeftBrokers()
    slow, done = FakeCalls(2), FakeCalls(0)
    left.add(slow, 1, 7)
    left.add(done, 2, 3)
    released = []
    assert left.release_finished(lambda node, generation: released.append((node, generation)))
    assert released == [(2, 3)]  # the broker whose calls returned, and only it
    slow.outstanding = 0
    assert not left.release_finished(lambda node, generation: released.append((node, generation)))
    assert released == [(2, 3), (1, 7)] and not left.pending


def test_at_close_every_broker_left_is_released_after_its_calls():
    left = LeftBrokers()
    calls = FakeCalls(3)
    left.add(calls, 1, 1)
    released = []
    left.release_all(lambda node, generation: released.append((node, generation, calls.outstanding)))
    assert released == [(1, 1, 0)] and not left.pending


def test_a_release_that_raises_is_not_made_again():
    left = LeftBrokers()
    left.add(FakeCalls(0), 1, 1)
    left.add(FakeCalls(0), 2, 1)
    released = []

    def release(node: int, generation: int) -> None:
        released.append(node)
        if node == 2:
            raise RuntimeError("the RetryHandler is gone")

    try:
        left.release_finished(release)
    except RuntimeError:
        pass
    assert not left.release_finished(release) and released == [1, 2]  # each once


class FakeWake:
    """A `Wake` that records how it is armed."""

    def __init__(self) -> None:
        self.armed = False
        self.waits: list[tuple[str, float]] = []

    def arm(self, delay_s: float) -> None:
        if not self.armed:
            self.armed = True
            self.waits.append(("arm", delay_s))

    def arm_by(self, delay_s: float) -> None:
        self.armed = True
        self.waits.append(("arm_by", delay_s))

    def fired(self) -> None:
        self.armed = False

    def cancel(self) -> None:
        self.armed = False


def test_both_shells_arm_the_held_timer_on_backoff_and_the_deadline_on_the_first_deadline():
    """`PartitionTimers`, which the actor and the in-process pipeline both arm after each call."""
    held, deadline = FakeWake(), FakeWake()
    timers = PartitionTimers(HoldBackoff(100), held, deadline)
    quiet = LeaderDispatcherState("t", 1, FakeBackend(), delivery_timeout_ms=1000)
    timers.arm([quiet], now_ms=0)
    assert held.waits == [] and deadline.waits == []  # nothing waits: no timer
    no_leader = LeaderDispatcherState("t", 2, FakeBackend(fail_leader=10), delivery_timeout_ms=1000)
    no_leader.dispatch(msg("held"))
    _, behind = waiting_behind_a_retry()
    late = msg("late")
    late.created_ms = 5000
    behind.dispatch(late)
    timers.arm([quiet, no_leader, behind], now_ms=5500)
    assert held.waits == [("arm", 0.1)] and deadline.waits == [("arm_by", 0.5 + DEADLINE_SLACK_S)]
    timers.arm([quiet, no_leader, behind], now_ms=5600)
    assert held.waits == [("arm", 0.1)]  # armed already: the backoff does not move on
    timers.expire_waiting([behind], now_ms=6100)
    assert behind.next_deadline_ms() is None and behind.backend.errors
    timers.retry_held([no_leader], now_ms=0)
    assert timers.backoff.attempts == 1  # still held: the backoff goes on
    no_leader.backend.fail_leader = 0
    timers.retry_held([no_leader], now_ms=0)
    assert timers.backoff.attempts == 0 and no_leader.backend.data() == ["held"]
    timers.cancel()
    assert not held.armed and not deadline.armed


def test_at_close_what_waits_fails_once_and_what_may_be_written_says_so():
    backend, state = waiting_behind_a_retry()
    new, sent = msg("new"), msg("sent", retries=1)
    sent.possibly_written = True  # a retry whose request went unanswered, waiting behind level 2
    state.dispatch(msg("a", retries=2))
    state.dispatch(new)
    state.dispatch(sent)
    fail_waiting([state])
    errors = {names[0]: error for names, error in backend.errors}
    assert type(errors[b"new"]) is ProducerClosedError and isinstance(errors[b"sent"], OutcomeUnknownError)
    assert all(not level.buf for level in state.levels.values()) and not state.held
    fail_waiting([state])  # a second close, or a timer's late call, ends nothing again
    assert len(backend.errors) == 2
