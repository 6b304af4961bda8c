"""A group member's lag (`Session.lag`, what a group sized by lag grows by): records not fetched
yet plus records handed out and not marked; offsets that hold no record for a handler (a
transaction's marker, aborted records) are fetched past and count none."""

from __future__ import annotations

from types import SimpleNamespace

from raykafka.actors.group_session import Claim, Session
from raykafka.wire.group_coordinator import Generation


def session_of(*claims: Claim) -> Session:
    runtime = SimpleNamespace(handler_failures=0, coordinator=SimpleNamespace(group_id="g", instance_id=None))
    return Session(runtime, Generation(1, "m", "m", "cooperative-sticky", {}), {(c.topic, c.partition): c for c in claims})


def test_lag_is_what_is_not_fetched_plus_what_is_handed_out_and_not_marked():
    claim = Claim("t", 0, 100)
    session = session_of(claim)
    assert session.lag() == 0, "not fetched yet: no high watermark, no lag"
    claim.high_watermark, claim.fetched_to, claim.handed_end = 250, 150, 150
    assert session.lag() == 100 + 50
    session.mark("t", 0, 120)
    assert session.lag() == 100 + 30


def test_a_transaction_marker_and_aborted_records_count_no_lag():
    claim = Claim("t", 0, 0)
    session = session_of(claim)
    # records 0-8 handed out, 9 is the commit marker, 10-19 an aborted transaction and its marker
    claim.high_watermark, claim.fetched_to, claim.handed_end = 20, 20, 9
    session.mark("t", 0, 9)
    assert session.lag() == 0
