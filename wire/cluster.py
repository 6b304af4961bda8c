"""The cluster client: bootstrap, metadata, leaders and coordinators, one connection per broker
(and one to a broker that is a coordinator, for the coordinator's requests).

`Cluster` owns every `BrokerConnection` of one client. Metadata is refreshed on demand (a
leader moved, a topic is new) and at least every `metadata.max.age.ms`; concurrent callers
asking for a refresh share one Metadata request.

Connecting is paced per connection as librdkafka paces its broker connections
(`ReconnectBackoff`): an attempt starts at least `reconnect.backoff.ms` after the one before,
that wait doubles with every attempt up to `reconnect.backoff.max.ms`, and it starts again from
the bottom once the connection has been left alone for that long. So a caller's retry loop (a
consumer riding out a broker outage) can simply ask again: the connection attempt itself waits
its turn. The bootstrap connection and each broker's connection, extra connection and
coordinator connection are paced apart (one client first connects to a bootstrap server, then
to the broker at that same address: the second is no reconnect). The producer's Flushers
(actors/flusher.py), which own their connections, pace them with the same `ReconnectBackoff`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import messages
from .config import Config
from .connection import BrokerConnection, security_from_config
from .errors import BY_NAME, BrokerConnectionError, BrokerError, KafkaError, UnknownTopicError

log = logging.getLogger("raykafka.wire.cluster")

_LEADER_NOT_AVAILABLE = BY_NAME["LEADER_NOT_AVAILABLE"].code
# The coordinator of a group or a transaction is spoken to on a connection of its own, kept as
# COORDINATOR_CONNECTIONS - its node id (the Java client's rule): a broker answers a connection's
# requests in order, so a JoinGroup it holds for seconds must not hold the fetches behind it
COORDINATOR_CONNECTIONS = 2**31 - 1


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    error_code: int
    partitions: dict[int, PartitionInfo]
    is_internal: bool = False
    topic_id: Any = None  # a uuid.UUID from Metadata v10+; Fetch v13+ names topics by it


@dataclass
class Metadata:
    """What the last Metadata response said; replaced whole on every refresh."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    fetched_at: float = 0.0

    def leader(self, topic: str, partition: int) -> int:
        """The leader's node id, or -1 while there is none."""
        info = self.topics.get(topic)
        if info is None or partition not in info.partitions:
            return -1
        return info.partitions[partition].leader

    def partitions(self, topic: str) -> list[int]:
        info = self.topics.get(topic)
        return sorted(info.partitions) if info else []


class ReconnectBackoff:
    """When the next connection attempt to one broker address may start (librdkafka's rule).

    Each attempt is scheduled `backoff` after it starts, with -25%..+50% jitter, capped at
    `max_backoff`; `backoff` then doubles up to `max_backoff`. An attempt that comes more than
    `max_backoff` after the last one scheduled starts from `initial` again."""

    def __init__(self, initial_ms: int, max_ms: int, jitter: random.Random | None = None):
        self.initial = initial_ms / 1000
        self.max = max(max_ms, initial_ms) / 1000
        self.backoff = self.initial
        self.next_at = float("-inf")
        self.attempts = 0
        self._random = jitter or random.Random()

    @classmethod
    def from_config(cls, config: Config) -> ReconnectBackoff:
        """The backoff `reconnect.backoff.ms` and `reconnect.backoff.max.ms` describe."""
        return cls(config["reconnect.backoff.ms"], config["reconnect.backoff.max.ms"])

    def wait(self, now: float) -> float:
        """Seconds until an attempt may start."""
        return max(0.0, self.next_at - now)

    def attempt(self, now: float) -> float:
        """An attempt starts at `now`: schedule the earliest next one; return its wait."""
        if now - self.next_at > self.max:
            self.backoff = self.initial
        wait = min(self.max, self.backoff * self._random.uniform(0.75, 1.5))
        self.next_at = now + wait
        self.backoff = min(self.max, self.backoff * 2)
        self.attempts += 1
        return wait

    async def pace(self, path: str) -> None:
        """Wait until an attempt may start, then count one as started (`path` names the
        connection in the log)."""
        wait = self.wait(time.monotonic())
        if wait > 0:
            log.debug("%s reconnect backoff %.2fs", path, wait)
            await asyncio.sleep(wait)
        self.attempt(time.monotonic())


class Cluster:
    """Connections and metadata for one client; all methods run on one asyncio loop."""

    def __init__(self, config: Config):
        self.config = config
        self.client_id: str = config["client.id"]
        self.ssl_context, self.sasl = security_from_config(config)
        self.metadata = Metadata()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future[BrokerConnection]] = {}
        self._bootstrap: BrokerConnection | None = None
        self._refreshing: asyncio.Future[Metadata] | None = None
        self._coordinators: dict[tuple[int, str], int] = {}
        self._known_topics: set[str] = set()
        self.backoffs: dict[tuple[int, str, int, bool], ReconnectBackoff] = {}  # (node, host, port, extra)

    # -- connections -------------------------------------------------------

    async def _connect(self, host: str, port: int, node_id: int, role: str = "") -> BrokerConnection:
        """A new connection to `host:port` (broker `node_id`, -1 for a bootstrap server), once its
        reconnect backoff allows it (each `role` of connection to a broker has a backoff of its own)."""
        key = (node_id, host, port, role)
        backoff = self.backoffs.get(key)
        if backoff is None:
            backoff = self.backoffs[key] = ReconnectBackoff.from_config(self.config)
        await backoff.pace(f"cluster/{host}:{port}")
        return await BrokerConnection(host, port, node_id=node_id, client_id=self.client_id,
                                      request_timeout_ms=self.config["request.timeout.ms"],
                                      connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
                                      ssl_context=self.ssl_context, sasl=self.sasl).connect()

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker: a known one, else a bootstrap server."""
        for key, conn in self._connections.items():
            if key == conn.node_id and conn.connected:  # not a coordinator's: a held JoinGroup would hold it
                return conn
        if self._bootstrap is not None and self._bootstrap.connected:
            return self._bootstrap
        errors = []
        tried = set()
        for node_id, broker in list(self.metadata.brokers.items()):
            tried.add((broker.host, broker.port))
            try:
                return await self.connection(node_id)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        for host, port in self.config["bootstrap.servers"]:
            if (host, port) in tried:
                continue  # just tried as a known broker: its backoff would only double
            try:
                self._bootstrap = await self._connect(host, port, -1)
                return self._bootstrap
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise BrokerConnectionError("no bootstrap server reachable: " + "; ".join(errors))

    async def connection(self, node_id: int) -> BrokerConnection:
        """The connection to broker `node_id`, opened on first use and reopened after a drop."""
        return await self._pooled(node_id, node_id)

    async def _pooled(self, node_id: int, key: int) -> BrokerConnection:
        """The kept connection `key` to broker `node_id`, opened on first use and reopened after a drop."""
        conn = self._connections.get(key)
        if conn is not None and conn.connected:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata()
            broker = self.metadata.brokers.get(node_id)
            if broker is None:
                raise BrokerConnectionError(f"broker {node_id} is not in the cluster metadata")
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            conn = await self._connect(broker.host, broker.port, node_id, role="" if key == node_id else "coordinator")
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters see it through shield
            raise
        finally:
            self._connecting.pop(key, None)
        self._connections[key] = conn
        future.set_result(conn)
        return conn

    async def extra_connection(self, node_id: int) -> BrokerConnection:
        """A second connection to broker `node_id`, owned by the caller (a fetch that must not queue
        behind another on the shared one); paced by the same reconnect backoff."""
        main = await self.connection(node_id)
        return await self._connect(main.host, main.port, node_id, role="extra")

    async def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        leader = self.metadata.leader(topic, partition)
        if leader < 0:
            await self.refresh_metadata([topic])
            leader = self.metadata.leader(topic, partition)
            if leader < 0:
                raise BrokerError(_LEADER_NOT_AVAILABLE, f"{topic}/{partition}")
        return await self.connection(leader)

    async def close(self) -> None:
        connections = list(self._connections.values())
        if self._bootstrap is not None:
            connections.append(self._bootstrap)
        self._connections.clear()
        self._bootstrap = None
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    # -- metadata ----------------------------------------------------------

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        """Ask for fresh metadata on `topics` (plus every topic asked about before; None: all)."""
        if topics is not None:
            self._known_topics.update(topics)
        if self._refreshing is not None:
            return await asyncio.shield(self._refreshing)
        future: asyncio.Future[Metadata] = asyncio.get_running_loop().create_future()
        self._refreshing = future
        try:
            wanted = None if topics is None else sorted(self._known_topics)
            metadata = await self._fetch_metadata(wanted)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            self._refreshing = None
        self.metadata = metadata
        future.set_result(metadata)
        return metadata

    async def _fetch_metadata(self, topics: list[str] | None) -> Metadata:
        last: Exception | None = None
        for _attempt in range(3):
            conn = await self.any_connection()
            body: dict[str, Any] = {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False,
            }
            try:
                response = await conn.request(messages.METADATA, body)
            except BrokerConnectionError as exc:
                last = exc
                continue
            return _metadata_from(response)
        raise last or BrokerConnectionError("metadata refresh failed")

    async def topic(self, name: str, refresh: bool = False) -> TopicInfo:
        """The topic's metadata; raise `UnknownTopicError` when the cluster has no such topic."""
        info = self.metadata.topics.get(name)
        stale = time.monotonic() - self.metadata.fetched_at > self.config["metadata.max.age.ms"] / 1000
        if info is None or refresh or stale or info.error_code:
            await self.refresh_metadata([name])
            info = self.metadata.topics.get(name)
        if info is None or info.error_code == 3:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        if info.error_code:
            raise BrokerError(info.error_code, f"metadata for topic {name!r}")
        return info

    # -- coordinators ------------------------------------------------------

    async def coordinator(self, key: str, key_type: int = 0) -> BrokerConnection:
        """The connection to the group (key_type 0) or transaction (1) coordinator for `key`."""
        node = self._coordinators.get((key_type, key))
        if node is not None:
            try:
                return await self._pooled(node, COORDINATOR_CONNECTIONS - node)
            except KafkaError:
                self._coordinators.pop((key_type, key), None)
        conn = await self.any_connection()
        api = messages.FIND_COORDINATOR
        version = conn.version_for(api)
        if version >= 4:
            response = await conn.request(api, {"key_type": key_type, "coordinator_keys": [key]}, version)
            entry = response.coordinators[0]
            error, node_id, host, port = entry.error_code, entry.node_id, entry.host, entry.port
        else:
            response = await conn.request(api, {"key": key, "key_type": key_type}, version)
            error, node_id, host, port = response.error_code, response.node_id, response.host, response.port
        if error:
            raise BrokerError(error, f"FindCoordinator for {key!r}")
        if node_id not in self.metadata.brokers:
            self.metadata.brokers[node_id] = BrokerInfo(node_id, host, port)
        self._coordinators[(key_type, key)] = node_id
        return await self._pooled(node_id, COORDINATOR_CONNECTIONS - node_id)

    def forget_coordinator(self, key: str, key_type: int = 0) -> None:
        self._coordinators.pop((key_type, key), None)


def _metadata_from(response: Any) -> Metadata:
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.get("rack")) for b in response.brokers}
    topics = {}
    for t in response.topics:
        if t.name is None:
            continue
        partitions = {
            p.partition_index: PartitionInfo(p.partition_index, p.leader_id, p.get("leader_epoch", -1),
                                             tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
            for p in t.partitions
        }
        topics[t.name] = TopicInfo(t.name, t.error_code, partitions, t.get("is_internal", False), t.get("topic_id"))
    return Metadata(brokers, topics, response.get("controller_id", -1), response.get("cluster_id"),
                    time.monotonic())
