"""The producer's own protocol calls, without Ray: InitProducerId.

Called by the TopicDispatcher (the producer id at start) and the LeaderDispatcher (a new id
once a partition's sequence broke), through `actors.idempotence`; calls the cluster client
(wire/cluster.py) for a connection to any broker.
"""

from __future__ import annotations

import logging
from typing import Any

from . import messages
from .errors import BrokerError, UnsupportedVersionError

log = logging.getLogger("raykafka.producer.topic")

NO_PRODUCER_ID = (-1, -1)  # (producer id, epoch) without idempotence


BUMP_MIN_VERSION = 3  # InitProducerId carries the producer id and epoch to bump from v3 (KIP-360)


async def init_producer_id(cluster: Any, bump: tuple[int, int] | None = None) -> tuple[int, int]:
    """A producer id and epoch from InitProducerId, or (-1, -1) when the broker has none.

    `bump`: the (producer id, epoch) of an idempotent producer whose writer died (KIP-360). A
    broker that bumps answers the same id with the next epoch, and a partition refuses the old
    epoch once a batch of the new one lands there; Kafka's coordinator answers a producer
    without `transactional.id` with a new id instead (the caller checks which). A broker that
    cannot bump raises (`UnsupportedVersionError` before v3, else the `BrokerError` it answers;
    tansu answers UNKNOWN_SERVER_ERROR)."""
    conn = await cluster.any_connection()
    try:
        version = conn.version_for(messages.INIT_PRODUCER_ID)
    except UnsupportedVersionError:
        if bump is not None:
            raise
        log.info("producer/topic: the broker has no InitProducerId; idempotence off")
        return NO_PRODUCER_ID
    body: dict[str, Any] = {"transactional_id": None, "transaction_timeout_ms": 2147483647}
    if bump is not None:
        if version < BUMP_MIN_VERSION:
            raise UnsupportedVersionError(f"InitProducerId v{version} cannot bump an epoch (v{BUMP_MIN_VERSION}+)")
        body["producer_id"], body["producer_epoch"] = bump
    response = await conn.request(messages.INIT_PRODUCER_ID, body)
    if response.error_code:
        raise BrokerError(response.error_code, "InitProducerId" if bump is None else f"InitProducerId bumping {bump}")
    log.info("producer/topic: producer id %d epoch %d", response.producer_id, response.producer_epoch)
    return response.producer_id, response.producer_epoch
