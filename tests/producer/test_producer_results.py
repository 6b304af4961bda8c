"""The `Mailbox` (no Ray): the outcomes and notes an actor decided until the driver polls them,
and the sequence bookkeeping a RESET asks (up to where every numbered batch of a partition
ended, merged across the mailboxes where batches end)."""

from __future__ import annotations

import threading

from raykafka.actors.batch import MessageBatch
from raykafka.actors.idempotence import EndedSequences
from raykafka.actors.producer_results import Mailbox, NumberedBatch, Outcome, report_failed


def first_unresolved(mailbox: Mailbox, numbering: int = 0) -> int:
    return mailbox.first_unresolved("t", 0, 7, numbering)


def test_the_first_unresolved_sequence_advances_only_over_batches_that_ended():
    mailbox = Mailbox()
    assert first_unresolved(mailbox) == 0
    ok, failed = None, RuntimeError("gave up")
    mailbox.report([Outcome([1, 2], "t", 0, 10, -1, ok)], [("t", 0, 7, 0, 2, 2)])  # 2-3 ended first
    assert first_unresolved(mailbox) == 0  # 0-1 has not
    mailbox.report([Outcome([0], "t", 0, -1, -1, failed)], [("t", 0, 7, 0, 0, 2)])  # a failure ends it too
    assert first_unresolved(mailbox) == 4
    assert first_unresolved(mailbox, numbering=1) == 0  # another numbering counts on its own
    assert [e[0] for e in mailbox.poll(0).outcomes] == [[1, 2], [0]]


def test_what_ended_in_several_mailboxes_merges_into_the_first_gap():
    """A partition's batches end on the worker of its first leader, then on the next one's, and
    one fails before the brokers (the RetryHandler's): the merge of their intervals finds the gap."""
    first, second, retry = Mailbox(), Mailbox(), Mailbox()
    first.report([Outcome([0], "t", 0, 0, -1, None)], [("t", 0, 7, 0, 0, 10)])  # 0-9
    second.report([Outcome([2], "t", 0, 20, -1, None)], [("t", 0, 7, 0, 20, 5)])  # 20-24, beyond a gap
    retry.report([Outcome([1], "t", 0, -1, -1, RuntimeError("no leader"))], [("t", 0, 7, 0, 10, 5)])  # 10-14
    assert first.ended_intervals() == [(("t", 0, 7, 0), 0, 10)]
    merged = EndedSequences()
    for mailbox in (second, retry, first):  # in any order
        merged.merge(mailbox.ended_intervals())
    assert merged.first_unresolved("t", 0, 7, 0) == 15  # 15-19 has not ended anywhere
    second.report([Outcome([3], "t", 0, 25, -1, None)], [("t", 0, 7, 0, 15, 5)])
    merged.merge(second.ended_intervals())
    assert merged.first_unresolved("t", 0, 7, 0) == 25


def test_a_poll_wakes_on_the_first_report_and_takes_everything_since():
    woken: list[int] = []
    mailbox = Mailbox(wake=lambda: woken.append(1))
    assert mailbox.poll(0.01) == ([], [], False, None)
    got: list = []
    poller = threading.Thread(target=lambda: got.append(mailbox.poll(60)))
    poller.start()
    mailbox.report([Outcome([5, 6], "t", 1, 30, -1, None)])
    poller.join(20)
    assert not poller.is_alive()  # woken by the report, not by its 60 s timeout
    assert got == [([([5, 6], "t", 1, 30, -1, None)], [], False, None)]
    assert woken == [1]  # an async actor's event is set there
    assert mailbox.poll(0) == ([], [], False, None)


def test_numbered_batches_are_noted_and_handed_over_with_the_next_poll_once():
    """A BrokerWorker notes what it received numbered; the notes reach the driver with the outcomes."""
    mailbox = Mailbox()
    numbered = MessageBatch(topic="t", partition=2, ids=range(100, 103), values=[b"a", b"b", b"c"],
                            created_ms=1_700_000_000_000)
    numbered.producer_id, numbered.producer_epoch, numbered.base_sequence = 7, 0, 40
    plain = MessageBatch(topic="t", partition=2, ids=[9], values=[b"x"])  # no producer id: no note
    mailbox.noted([numbered, plain, MessageBatch.control("t", 2, 0)])
    mailbox.report([Outcome([9], "t", 0, 5, -1, None)])
    (note,) = mailbox.poll(0).numbered
    assert isinstance(note, NumberedBatch) and note[:5] == ("t", 2, 7, 0, 40) and list(note.ids) == [100, 101, 102]
    assert mailbox.poll(0) == ([], [], False, None)
    silent = Mailbox(notes=False)  # a transactional producer does not heal: no notes kept
    silent.noted([numbered])
    assert silent.take().numbered == []


def test_a_closed_mailbox_says_so_at_once_and_with_what_it_still_holds():
    mailbox = Mailbox()
    mailbox.report([Outcome([1], "t", 0, 3, -1, None)])
    waiting: list = []
    mailbox.close()
    poller = threading.Thread(target=lambda: waiting.append(mailbox.poll(60)))
    poller.start()
    poller.join(20)
    assert waiting == [([([1], "t", 0, 3, -1, None)], [], True, None)]


def test_report_failed_reports_each_batch_with_messages_and_its_span():
    got: list = []
    numbered = MessageBatch(topic="t", partition=1, ids=[4, 5], values=[b"a", b"b"])
    numbered.producer_id, numbered.producer_epoch, numbered.base_sequence = 7, 0, 12
    report_failed(lambda outcomes, spans: got.append((outcomes, spans)),
                  [numbered, MessageBatch.control("t", 1, 0)], RuntimeError("down"))
    ((outcomes, spans),) = got
    assert [(list(o.ids), o.topic, o.partition) for o in outcomes] == [([4, 5], "t", 1)]
    assert [tuple(s) for s in spans] == [("t", 1, 7, 0, 12, 2)]
