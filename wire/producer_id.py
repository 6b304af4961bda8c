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


async def init_producer_id(cluster: Any) -> tuple[int, int]:
    """A producer id and epoch from InitProducerId, or (-1, -1) when the broker has none."""
    conn = await cluster.any_connection()
    try:
        conn.version_for(messages.INIT_PRODUCER_ID)
    except UnsupportedVersionError:
        log.info("producer/topic: the broker has no InitProducerId; idempotence off")
        return NO_PRODUCER_ID
    response = await conn.request(messages.INIT_PRODUCER_ID, {
        "transactional_id": None, "transaction_timeout_ms": 2147483647})
    if response.error_code:
        raise BrokerError(response.error_code, "InitProducerId")
    log.info("producer/topic: producer id %d epoch %d", response.producer_id, response.producer_epoch)
    return response.producer_id, response.producer_epoch
