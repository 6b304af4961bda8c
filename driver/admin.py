"""`Admin`: topics and cluster metadata from a driver program (no Ray needed).

Each call runs on the client's own asyncio loop thread and returns plain values; a broker
error raises `BrokerError` naming the topic and the code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..wire import messages
from ..wire.cluster import Cluster, Metadata
from ..wire.config import parse_config
from ..wire.errors import BrokerError
from ..wire.loop import LoopThread


class Admin:
    """Create, delete, list and grow topics; read offsets and metadata."""

    def __init__(self, config: Mapping[str, Any] | str):
        if isinstance(config, str):
            config = {"bootstrap.servers": config}
        self.config = parse_config(config)
        self._loop = LoopThread("raykafka-admin")
        self.cluster = Cluster(self.config)
        self._timeout = self.config["request.timeout.ms"] / 1000 + 5

    def _run(self, coro: Any) -> Any:
        return self._loop.run(coro, self._timeout * 2)

    def create_topics(self, topics: Mapping[str, int] | Iterable[str], num_partitions: int = 1,
                      replication_factor: int = 1, config: Mapping[str, str] | None = None,
                      exist_ok: bool = False) -> None:
        """Create topics: a `{name: partitions}` mapping or names that all get `num_partitions`."""
        wanted = dict(topics) if isinstance(topics, Mapping) else {t: num_partitions for t in topics}
        self._run(self._create_topics(wanted, replication_factor, dict(config or {}), exist_ok))

    async def _create_topics(self, wanted: dict[str, int], replication_factor: int,
                             config: dict[str, str], exist_ok: bool) -> None:
        conn = await self.cluster.any_connection()
        body = {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in config.items()]}
                       for name, partitions in wanted.items()],
            "timeout_ms": int(self._timeout * 1000),
            "validate_only": False,
        }
        response = await conn.request(messages.CREATE_TOPICS, body)
        for topic in response.topics:
            if topic.error_code == 36 and exist_ok:
                continue
            if topic.error_code:
                raise BrokerError(topic.error_code, f"create topic {topic.name!r}", topic.get("error_message"))
        await self.cluster.refresh_metadata(list(wanted))

    def delete_topics(self, names: Iterable[str], missing_ok: bool = False) -> None:
        self._run(self._delete_topics(list(names), missing_ok))

    async def _delete_topics(self, names: list[str], missing_ok: bool) -> None:
        conn = await self.cluster.any_connection()
        version = conn.version_for(messages.DELETE_TOPICS)
        body: dict[str, Any] = {"timeout_ms": int(self._timeout * 1000)}
        if version >= 6:
            body["topics"] = [{"name": n} for n in names]
        else:
            body["topic_names"] = names
        response = await conn.request(messages.DELETE_TOPICS, body, version)
        for result in response.responses:
            if result.error_code == 3 and missing_ok:
                continue
            if result.error_code:
                raise BrokerError(result.error_code, f"delete topic {result.name!r}", result.get("error_message"))

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow `topic` to `total` partitions."""
        self._run(self._create_partitions(topic, total))

    async def _create_partitions(self, topic: str, total: int) -> None:
        conn = await self.cluster.any_connection()
        body = {"topics": [{"name": topic, "count": total, "assignments": None}],
                "timeout_ms": int(self._timeout * 1000), "validate_only": False}
        response = await conn.request(messages.CREATE_PARTITIONS, body)
        for result in response.results:
            if result.error_code:
                raise BrokerError(result.error_code, f"create partitions for {result.name!r}", result.get("error_message"))

    def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        return self._run(self.cluster.refresh_metadata(None if topics is None else list(topics)))

    def list_topics(self) -> dict[str, int]:
        """Every topic and its partition count."""
        metadata = self._run(self.cluster.refresh_metadata(None))
        return {name: len(info.partitions) for name, info in sorted(metadata.topics.items())
                if not info.is_internal and not name.startswith("__")}

    def close(self) -> None:
        try:
            self._run(self.cluster.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
