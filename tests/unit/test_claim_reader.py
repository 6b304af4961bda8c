"""A group member's fetch loop without Ray or a broker (actors/claim_reader.py): an answer is
taken only by the claim whose fetch asked for it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from raykafka.actors import claim_reader
from raykafka.actors.claim_reader import ClaimReader
from raykafka.actors.group_session import Claim
from raykafka.wire.config import parse_config
from raykafka.wire.fetch_round import FetchAnswer, PartitionAnswer
from raykafka.wire.fetcher import Data, PartitionFetch
from raykafka.wire.record_encoding import encode_record_batch

TP = ("t", 0)


def test_an_answer_for_a_fetch_of_a_revoked_claim_feeds_nothing_to_the_claim_given_back(monkeypatch):
    """A fetch at offset 50 is out when a cooperative rejoin revokes t/0, and a later generation
    hands it back at its committed offset 10 (a new claim, a new fetch). The old answer, records
    50..52, must not reach the new claim: it would hand 50.. before 10.., and commit past 10..49."""
    config = parse_config({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    old_fetch = PartitionFetch(config, *TP, 50)
    claims, positions = {TP: Claim(*TP, 50)}, {TP: old_fetch}
    given_back = Claim(*TP, 10)
    records = encode_record_batch([b"a", b"b", b"c"], base_offset=50)

    async def answered_after_the_rejoin(conn, cfg, asked, **_):
        claims[TP], positions[TP] = given_back, PartitionFetch(config, *TP, 10)
        response = SimpleNamespace(responses=[SimpleNamespace(partitions=[SimpleNamespace(records=records)])])
        return FetchAnswer(cfg, response, [PartitionAnswer(TP, asked[TP], Data(records, 50, 53, 53, 53))])

    async def connection(_leader):
        return None

    monkeypatch.setattr(claim_reader, "fetch_round", answered_after_the_rejoin)
    owner = SimpleNamespace(config=config, cluster=SimpleNamespace(connection=connection), fetched_batches=0,
                            metrics=SimpleNamespace(fetch_timed=lambda leader, request: request,
                                                    fetched=lambda *a: None),
                            coordinator=SimpleNamespace(group_id="g"), _record=lambda *a: None)
    problem = asyncio.run(ClaimReader(owner)._fetch_from(1, [TP], claims, positions))
    assert problem is None
    assert owner.fetched_batches == 0 and given_back.error is None
    assert given_back.fetched_to == 10, "the claim given back fetches from its own offset"
