"""The mock cluster's default handlers for DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs and DeleteRecords.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire import messages
from ..wire.protocol import Api, Struct
from .broker import MockBroker
from .protocol_codes import (
    INVALID_CONFIG,
    INVALID_REQUEST,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # config resource types
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG = 1, 4  # DescribeConfigs' config_source
CONFIG_SET, CONFIG_DELETE, CONFIG_APPEND, CONFIG_SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
END_OFFSET = -1  # DeleteRecords' offset for "the high watermark"


class ConfigAndRecordHandlers:
    """DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DeleteRecords; one of `MockCluster`'s bases."""

    def _handle_describe_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """A topic's dynamic configs (what it was created with or altered to), a broker's static
        ones; only the keys asked for, where some are."""
        results = []
        with self.lock:
            for r in body.resources:
                configs: dict[str, str] = {}
                error = self._take_fault(messages.DESCRIBE_CONFIGS.key, broker.node_id,
                                         r.resource_name if r.resource_type == TOPIC_RESOURCE else None)
                source = DYNAMIC_TOPIC_CONFIG
                if error:
                    pass
                elif r.resource_type == TOPIC_RESOURCE and r.resource_name in self.topics:
                    configs = self.topics[r.resource_name].configs
                elif r.resource_type == TOPIC_RESOURCE:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif r.resource_type == BROKER_RESOURCE and r.resource_name == str(broker.node_id):
                    configs, source = self.broker_configs, STATIC_BROKER_CONFIG
                else:  # another broker's configs, or a resource type not modelled
                    error = INVALID_REQUEST
                keys = r.configuration_keys
                results.append({
                    "error_code": error, "error_message": None, "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "configs": [{"name": k, "value": v, "read_only": source == STATIC_BROKER_CONFIG,
                                 "is_default": False, "config_source": source, "is_sensitive": False,
                                 "synonyms": [], "config_type": 0, "documentation": None}
                                for k, v in sorted(configs.items()) if keys is None or k in keys]})
        return {"throttle_time_ms": 0, "results": results}

    def _handle_alter_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """AlterConfigs: a topic's dynamic configs become exactly those given."""
        return self._alter_configs(messages.ALTER_CONFIGS, body, broker,
                                   lambda configs, asked: {c.name: c.value for c in asked})

    def _handle_incremental_alter_configs(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """IncrementalAlterConfigs: each key set, deleted, appended to or subtracted from (a
        comma-separated list), the others kept."""
        def apply(configs: dict[str, str], asked: list[Struct]) -> dict[str, str] | None:
            out = dict(configs)
            for c in asked:
                items = [i for i in out.get(c.name, "").split(",") if i]
                if c.config_operation == CONFIG_SET:
                    out[c.name] = c.value
                elif c.config_operation == CONFIG_DELETE:
                    out.pop(c.name, None)
                elif c.config_operation == CONFIG_APPEND:
                    out[c.name] = ",".join(items + [i for i in c.value.split(",") if i not in items])
                elif c.config_operation == CONFIG_SUBTRACT:
                    out[c.name] = ",".join(i for i in items if i not in c.value.split(","))
                else:
                    return None
            return out

        return self._alter_configs(messages.INCREMENTAL_ALTER_CONFIGS, body, broker, apply)

    def _alter_configs(self, api: Api, body: Struct, broker: MockBroker,
                       apply: Callable[[dict[str, str], list[Struct]], dict[str, str] | None]) -> dict[str, Any]:
        responses = []
        with self.lock:
            for r in body.resources:
                error = self._take_fault(api.key, broker.node_id, r.resource_name)
                t = self.topics.get(r.resource_name)
                if error:
                    pass
                elif r.resource_type != TOPIC_RESOURCE:
                    error = INVALID_REQUEST  # broker configs are not modelled
                elif t is None:
                    error = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    changed = apply(t.configs, list(r.configs))
                    if changed is None:
                        error = INVALID_CONFIG
                    elif not body.validate_only:
                        t.configs = changed
                responses.append({"error_code": error, "error_message": None,
                                  "resource_type": r.resource_type, "resource_name": r.resource_name})
        return {"throttle_time_ms": 0, "responses": responses}

    def _handle_delete_records(self, version: int, body: Struct, broker: MockBroker) -> dict[str, Any]:
        """DeleteRecords on the leader: the log start moves up to the offset asked (-1: the high
        watermark; never back), so Fetch and ListOffsets from the earliest start there; an offset
        past the high watermark is OFFSET_OUT_OF_RANGE."""
        topics = []
        with self.lock:
            for t in body.topics:
                parts = []
                for dp in t.partitions:
                    p = self._partition(t.name, dp.partition_index)
                    error = self._take_fault(messages.DELETE_RECORDS.key, broker.node_id, t.name, dp.partition_index)
                    if not error and p is None:
                        error = UNKNOWN_TOPIC_OR_PARTITION
                    elif not error and p is not None and p.leader != broker.node_id:
                        error = NOT_LEADER_OR_FOLLOWER
                    offset = dp.offset
                    if not error and p is not None:
                        offset = p.high_watermark if offset == END_OFFSET else offset
                        if not 0 <= offset <= p.high_watermark:
                            error = OFFSET_OUT_OF_RANGE
                        else:
                            p.log_start_offset = max(p.log_start_offset, offset)
                    parts.append({"partition_index": dp.partition_index, "error_code": error,
                                  "low_watermark": p.log_start_offset if p is not None and not error else -1})
                topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}
