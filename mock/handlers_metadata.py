"""The mock cluster's default handlers for ApiVersions, Metadata and CreateTopics."""

from __future__ import annotations

import uuid
from typing import Any

from ..wire import messages
from ..wire.protocol import Struct
from .broker import MockBroker
from .protocol_codes import INVALID_PARTITIONS, TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION
from .state import PartitionState


class MetadataHandlers:
    """ApiVersions, Metadata, CreateTopics; one of `MockCluster`'s bases."""

    def _api_versions_body(self, error_code: int = 0) -> dict[str, Any]:
        return {"error_code": error_code, "throttle_time_ms": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                             for k, (lo, hi) in sorted(self.versions.items())]}

    def _handle_api_versions(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        return self._api_versions_body(self._take_fault(messages.API_VERSIONS.key, broker.node_id))

    def _brokers_body(self) -> list[dict[str, Any]]:
        return [{"node_id": b.node_id, "host": "127.0.0.1", "port": b.port, "rack": None}
                for b in self.brokers.values()]

    def _handle_metadata(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        with self.lock:
            by_id = {t.topic_id: t.name for t in self.topics.values()}
            if body.topics is None or (version == 0 and not body.topics):
                names: list[str | None] = list(self.topics)
            else:
                names = [t.name if t.name is not None else by_id.get(t.topic_id) for t in body.topics]
            topics = []
            for name in names:
                t = self.topics.get(name) if name is not None else None
                fault = self._take_fault(messages.METADATA.key, broker.node_id, name)
                if t is None or fault:
                    topics.append({"error_code": fault or UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "partitions": []})
                    continue
                ids = list(self.brokers)
                topics.append({
                    "error_code": 0, "name": name, "topic_id": t.topic_id, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": i, "leader_id": p.leader,
                                    "leader_epoch": p.leader_epoch, "replica_nodes": ids,
                                    "isr_nodes": ids, "offline_replicas": []}
                                   for i, p in enumerate(t.partitions)],
                })
            return {"throttle_time_ms": 0, "brokers": self._brokers_body(), "cluster_id": self.cluster_id,
                    "controller_id": 1, "topics": topics}

    def _handle_create_topics(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        results = []
        for t in body.topics:
            error = self._take_fault(messages.CREATE_TOPICS.key, broker.node_id, t.name)
            if not error and t.num_partitions < 1:
                error = INVALID_PARTITIONS
            if not error and not body.validate_only:
                try:
                    self.create_topic(t.name, t.num_partitions)
                    self.topics[t.name].configs.update({c.name: c.value for c in t.configs})
                except ValueError:
                    error = TOPIC_ALREADY_EXISTS
            topic_id = self.topics[t.name].topic_id if t.name in self.topics else uuid.UUID(int=0)
            results.append({"name": t.name, "topic_id": topic_id, "error_code": error, "error_message": None,
                            "num_partitions": t.num_partitions, "replication_factor": 1, "configs": None})
        return {"throttle_time_ms": 0, "topics": results}

    def _leader_hint(self, p: PartitionState | None) -> dict[str, int]:
        if p is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": p.leader, "leader_epoch": p.leader_epoch}
