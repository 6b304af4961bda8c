"""The mock cluster's default handlers for InitProducerId and Produce.

Produce appends to a
partition's log only on its leader and assigns offsets. Idempotent producers are checked as
Kafka checks them: the last 5 batches per producer and partition are remembered, a re-sent
batch among them is answered DUPLICATE_SEQUENCE_NUMBER (with its offset, not written again),
and any other batch whose first sequence is not the next expected one (a gap, or a re-sent
batch older than the last 5) OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import struct
from typing import Any

from ..wire import messages
from ..wire.errors import DecodeError
from ..wire.protocol import Struct
from ..wire.record_decoding import decode_record_batches
from .broker import MockBroker
from .protocol_codes import (
    CORRUPT_MESSAGE,
    DUPLICATE_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from .state import ProducerState

_I32, _I64 = struct.Struct(">i"), struct.Struct(">q")


class ProduceHandlers:
    """InitProducerId, Produce; one of `MockCluster`'s bases."""

    def _handle_init_producer_id(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        error = self._take_fault(messages.INIT_PRODUCER_ID.key, broker.node_id)
        if error:
            return {"throttle_time_ms": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}
        with self.lock:
            if body.get("producer_id", -1) >= 0:  # an epoch bump for a producer id we handed out
                producer_id, epoch = body.producer_id, body.producer_epoch + 1
            else:
                producer_id, epoch = self._next_producer_id, 0
                self._next_producer_id += 1
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}

    def _handle_produce(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any] | None:
        responses = []
        moved: set[int] = set()
        with self.lock:
            for t in body.topic_data:
                parts = []
                for pd in t.partition_data:
                    part = self._produce_partition(broker.node_id, t.name, pd.index, pd.records)
                    if part["error_code"] == NOT_LEADER_OR_FOLLOWER and part["current_leader"]["leader_id"] >= 0:
                        moved.add(part["current_leader"]["leader_id"])
                    parts.append(part)
                responses.append({"name": t.name, "partition_responses": parts})
        if body.acks == 0:
            return None
        endpoints = [b for b in self._brokers_body() if b["node_id"] in moved]
        return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": endpoints}

    def _produce_partition(self, node_id: int, topic: str, index: int, records: bytes | None) -> dict[str, Any]:
        """Append one partition's batch on the leader; the partition's part of the answer."""
        p = self._partition(topic, index)
        out: dict[str, Any] = {"index": index, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                               "log_start_offset": -1, "record_errors": [], "error_message": None,
                               "current_leader": {"leader_id": -1, "leader_epoch": -1}}
        error = self._take_fault(messages.PRODUCE.key, node_id, topic, index)
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
                out["current_leader"] = self._leader_hint(p)
        if error:
            out["error_code"] = error
            return out
        assert p is not None
        out["log_start_offset"] = p.log_start_offset
        if self.message_max_bytes is not None and len(records or b"") > self.message_max_bytes:
            self.faults["message_too_large"] += 1
            out["error_code"] = MESSAGE_TOO_LARGE
            return out
        try:
            batches = decode_record_batches(records or b"")
        except DecodeError as exc:
            out["error_code"], out["error_message"] = CORRUPT_MESSAGE, str(exc)
            return out
        if len(batches) != 1 or _I32.unpack_from(records, 8)[0] + 12 != len(records):  # type: ignore[arg-type]
            out["error_code"] = INVALID_RECORD
            out["error_message"] = "a produce request carries exactly one record batch per partition"
            return out
        batch = batches[0]
        count = batch.last_offset_delta + 1
        state: ProducerState | None = None
        if batch.producer_id >= 0:
            state = p.producers.get(batch.producer_id)
            if state is None or batch.producer_epoch > state.epoch:
                if batch.base_sequence != 0:
                    out["error_code"] = OUT_OF_ORDER_SEQUENCE_NUMBER
                    return out
                state = p.producers[batch.producer_id] = ProducerState(batch.producer_epoch)
            elif batch.producer_epoch < state.epoch:
                out["error_code"] = INVALID_PRODUCER_EPOCH
                return out
            elif (kept := state.duplicate_of(batch.base_sequence,
                                             (batch.base_sequence + count - 1) & 0x7FFFFFFF)) is not None:
                out["error_code"] = DUPLICATE_SEQUENCE_NUMBER
                out["base_offset"] = -1 if self.duplicate_offset_unknown else kept.base_offset
                return out
            elif batch.base_sequence != state.next_sequence:  # a gap, or a batch too old to be recognised
                out["error_code"] = OUT_OF_ORDER_SEQUENCE_NUMBER
                return out
        offset = p.high_watermark
        # the base offset (bytes 0-7) and leader epoch (12-15) lie before the CRC's span
        stored = bytearray(records)  # type: ignore[arg-type]
        _I64.pack_into(stored, 0, offset)
        _I32.pack_into(stored, 12, p.leader_epoch)
        p.batches.append(bytes(stored))
        p.next_offsets.append(offset + count)
        self._notify_change()
        if state is not None:
            state.appended(batch.base_sequence, count, offset)
        out["base_offset"] = offset
        return out
