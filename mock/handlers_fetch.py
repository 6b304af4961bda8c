"""The mock cluster's default handlers for Fetch and ListOffsets.

Fetch reads a partition's log
on its leader, waits up to `max_wait_ms` for `min_bytes`, answers the last stable offset,
serves a read_committed fetch only below it, and lists the aborted transactions that overlap
the fetched range. Every Fetch answers session_id 0 (fetch sessions are not modelled).
"""

from __future__ import annotations

import asyncio
import bisect
import struct
import time
from typing import Any

from ..wire import messages
from ..wire.protocol import Struct
from ..wire.record_decoding import decode_record_batches
from .broker import MockBroker
from .protocol_codes import (
    FENCED_LEADER_EPOCH,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from .state import PartitionState

_I64 = struct.Struct(">q")


class FetchHandlers:
    """Fetch, ListOffsets; one of `MockCluster`'s bases."""

    async def _handle_fetch(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
        min_bytes = max(body.min_bytes, 1)
        faults_taken: dict[tuple[str, int], int] = {}
        while True:
            changed = broker.changed  # taken before looking, so no append slips between look and wait
            response, size, errors = self._fetch_once(version, body, broker.node_id, faults_taken)
            remaining = deadline - time.monotonic()
            if errors or size >= min_bytes or remaining <= 0:
                return response
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass

    def _fetch_once(self, version: int, body: Struct, node_id: int,
                    faults_taken: dict[tuple[str, int], int]) -> tuple[dict[str, Any], int, bool]:
        """One pass over the asked partitions: (response, bytes of records, any partition error)."""
        total = 0
        any_error = False
        budget = body.max_bytes
        responses = []
        moved: set[int] = set()
        with self.lock:
            by_id = {t.topic_id: t.name for t in self.topics.values()}
            for ft in body.topics:
                name = ft.topic if version <= 12 else by_id.get(ft.topic_id)
                parts = []
                for fp in ft.partitions:
                    key = (name or str(ft.topic_id), fp.partition)
                    if key not in faults_taken:  # a fault is taken once per request, not per poll
                        faults_taken[key] = self._take_fault(messages.FETCH.key, node_id, name, fp.partition)
                    part, data = self._fetch_partition(version, node_id, name, fp, faults_taken[key], budget,
                                                        body.get("isolation_level", 0) == 1)
                    if part["error_code"]:
                        any_error = True
                        if part["current_leader"]["leader_id"] >= 0:
                            moved.add(part["current_leader"]["leader_id"])
                    total += len(data)
                    budget -= len(data)
                    parts.append(part)
                responses.append({"topic": name or "", "topic_id": ft.topic_id, "partitions": parts})
        endpoints = [b for b in self._brokers_body() if b["node_id"] in moved]
        response = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses,
                    "node_endpoints": endpoints}
        return response, total, any_error

    def _fetch_partition(self, version: int, node_id: int, name: str | None, fp: Struct, fault: int,
                         budget: int, read_committed: bool = False) -> tuple[dict[str, Any], bytes]:
        p = self._partition(name, fp.partition) if name is not None else None
        out: dict[str, Any] = {"partition_index": fp.partition, "error_code": 0, "high_watermark": -1,
                               "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                               "preferred_read_replica": -1, "records": b"",
                               "current_leader": {"leader_id": -1, "leader_epoch": -1}}
        error = fault
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_ID if name is None and version > 12 else UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
                out["current_leader"] = self._leader_hint(p)
            elif fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if fp.current_leader_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
            elif not p.log_start_offset <= fp.fetch_offset <= p.high_watermark:
                error = OFFSET_OUT_OF_RANGE
        stable, aborted = p.transactions() if p is not None else (-1, [])
        if p is not None:
            out.update(high_watermark=p.high_watermark, last_stable_offset=stable,
                       log_start_offset=p.log_start_offset)
        if error:
            out["error_code"] = error
            return out, b""
        assert p is not None
        # from the batch holding fetch_offset on; at least one batch, then within the limits (KIP-74);
        # read_committed: only below the last stable offset
        first = bisect.bisect_right(p.next_offsets, fp.fetch_offset)
        chosen: list[bytes] = []
        size = 0
        limit = min(fp.partition_max_bytes, budget)
        for raw in p.batches[first:]:
            if chosen and size + len(raw) > limit or read_committed and _I64.unpack_from(raw)[0] >= stable:
                break
            chosen.append(raw)
            size += len(raw)
        data = b"".join(chosen)
        if self.cut_batches:
            data = b"".join(p.batches[first:])[:limit]
        out["records"] = data
        if read_committed and self.list_aborted:
            upper = p.next_offsets[first + len(chosen) - 1] if chosen else fp.fetch_offset
            out["aborted_transactions"] = [{"producer_id": pid, "first_offset": begin}
                                           for pid, begin, end in aborted if begin < upper and end >= fp.fetch_offset]
        return out, data

    def _handle_list_offsets(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        topics = []
        with self.lock:
            for t in body.topics:
                parts = []
                for lp in t.partitions:
                    parts.append(self._list_offset(version, broker.node_id, t.name, lp,
                                                   body.get("isolation_level", 0) == 1))
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, version: int, node_id: int, name: str, lp: Struct,
                     read_committed: bool = False) -> dict[str, Any]:
        p = self._partition(name, lp.partition_index)
        out: dict[str, Any] = {"partition_index": lp.partition_index, "error_code": 0, "old_style_offsets": [],
                               "timestamp": -1, "offset": -1, "leader_epoch": -1}
        error = self._take_fault(messages.LIST_OFFSETS.key, node_id, name, lp.partition_index)
        if not error:
            if p is None:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif p.leader != node_id:
                error = NOT_LEADER_OR_FOLLOWER
            elif lp.current_leader_epoch >= 0 and lp.current_leader_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if lp.current_leader_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
        if error:
            out["error_code"] = error
            return out
        assert p is not None
        if lp.timestamp == -2:  # earliest
            offset = p.log_start_offset
        elif lp.timestamp == -1:  # latest (read_committed: the last stable offset)
            offset = p.transactions()[0] if read_committed else p.high_watermark
        else:  # the first offset whose timestamp is at least the one asked for (-3: the max timestamp)
            offset, ts = self._offset_for_time(p, lp.timestamp)
            out["timestamp"] = ts
        out["offset"] = offset
        out["old_style_offsets"] = [offset]
        out["leader_epoch"] = p.leader_epoch
        return out

    def _offset_for_time(self, p: PartitionState, timestamp: int) -> tuple[int, int]:
        records = [r for raw in p.batches for b in decode_record_batches(raw) for r in b.records]
        if timestamp == -3:
            if not records:
                return -1, -1
            best = max(records, key=lambda r: (r.timestamp, -r.offset))
            return best.offset, best.timestamp
        for r in records:
            if r.timestamp >= timestamp:
                return r.offset, r.timestamp
        return -1, -1
