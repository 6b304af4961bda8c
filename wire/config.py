"""Configuration with Kafka's own property names, every default in one table.

A user's confluent-kafka or Java config carries over as it is. `parse_config` checks each
key and value when an object is built and raises `ConfigError` (a `ValueError`) naming the
key, so a typo fails at the point of the mistake, not later in an actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

Check = Callable[[str, Any], Any]


def _int(low: int | None = None, high: int | None = None) -> Check:
    def check(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if isinstance(value, float) and value != number:
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if low is not None and number < low:
            raise ConfigError(f"{key}: must be at least {low}, got {number}")
        if high is not None and number > high:
            raise ConfigError(f"{key}: must be at most {high}, got {number}")
        return number

    return check


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _optional_str(key: str, value: Any) -> str | None:
    return None if value is None else _str(key, value)


def _choice(*choices: str) -> Check:
    def check(key: str, value: Any) -> str:
        text = str(value).lower() if isinstance(value, (str, int)) else value
        if text not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(choices)}; got {value!r}")
        return text

    return check


def _acks(key: str, value: Any) -> int:
    if value in ("all", -1, "-1"):
        return -1
    if value in (0, 1, "0", "1"):
        return int(value)
    raise ConfigError(f"{key}: expected 0, 1, -1 or all; got {value!r}")


def _servers(key: str, value: Any) -> list[tuple[str, int]]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{key}: expected host:port[,host:port...], got {value!r}")
    servers = []
    for item in items:
        item = str(item).strip()
        for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://", "tcp://"):
            if item.upper().startswith(prefix.upper()):
                item = item[len(prefix):]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"{key}: {item!r} is not host:port")
        servers.append((host.strip("[]"), int(port)))
    return servers


def _strategies(key: str, value: Any) -> list[str]:
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    known = ("range", "roundrobin", "sticky", "cooperative-sticky")
    aliases = {"org.apache.kafka.clients.consumer.RangeAssignor": "range",
               "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
               "org.apache.kafka.clients.consumer.StickyAssignor": "sticky"}
    out = []
    for name in names:
        name = aliases.get(name, name).lower()
        if name not in known:
            raise ConfigError(f"{key}: unknown assignor {name!r} (known: {', '.join(known[:3])})")
        out.append(name)
    if not out:
        raise ConfigError(f"{key}: needs at least one assignor")
    return out


def _codec_name(key: str, value: Any) -> str:
    from .compression import Compression

    text = str(value).lower()
    Compression.from_name(text)
    return text


def _partitioner(key: str, value: Any) -> Any:
    if callable(value):
        return value
    from .partitioners import get_partitioner

    get_partitioner(str(value))
    return str(value)


SERDE_NAMES = ("bytes", "str", "json", "msgpack")


def _serde(key: str, value: Any) -> Any:
    if callable(value) or value in SERDE_NAMES:
        return value
    raise ConfigError(f"{key}: expected one of {', '.join(SERDE_NAMES)} or a callable, got {value!r}")


def _any(key: str, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Property:
    default: Any
    check: Check
    doc: str


MS = _int(0)
POSITIVE = _int(1)

# Every property, its default and its check. Defaults follow the Java client unless noted.
PROPERTIES: dict[str, Property] = {
    # common
    "bootstrap.servers": Property(None, _servers, "host:port list to bootstrap from"),
    "client.id": Property("raykafka", _str, "sent with every request"),
    "request.timeout.ms": Property(30000, POSITIVE, "how long a request may wait for its response"),
    "metadata.max.age.ms": Property(300000, MS, "refresh metadata at least this often"),
    "reconnect.backoff.ms": Property(100, MS, "first wait before reconnecting to a broker; doubles per attempt (librdkafka)"),
    "reconnect.backoff.max.ms": Property(10000, MS, "the reconnect wait grows up to this (librdkafka)"),
    "socket.connection.setup.timeout.ms": Property(10000, POSITIVE, "TCP connect timeout"),
    "security.protocol": Property("plaintext", _choice("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"), ""),
    "sasl.mechanism": Property("PLAIN", lambda k, v: _choice("plain", "scram-sha-256", "scram-sha-512")(k, v).upper(), ""),
    "sasl.username": Property(None, _optional_str, ""),
    "sasl.password": Property(None, _optional_str, ""),
    "ssl.ca.location": Property(None, _optional_str, "CA bundle to verify the broker with"),
    "ssl.certificate.location": Property(None, _optional_str, "client certificate"),
    "ssl.key.location": Property(None, _optional_str, "client key"),
    "ssl.key.password": Property(None, _optional_str, ""),
    "ssl.endpoint.identification.algorithm": Property("https", _choice("https", "none", ""), ""),
    # producer
    "acks": Property(-1, _acks, "0, 1 or all (-1)"),
    "linger.ms": Property(5, MS, "wait this long for a batch to fill (librdkafka's default)"),
    "batch.size": Property(1048576, POSITIVE, "bytes in one partition's batch"),
    "batch.num.messages": Property(10000, POSITIVE, "records in one partition's batch"),
    "compression.type": Property("none", _codec_name, "none, gzip, snappy, lz4, zstd"),
    "enable.idempotence": Property(True, _bool, "producer id, epoch and sequences; no duplicates on retry"),
    "max.in.flight.requests.per.connection": Property(5, _int(1, 5), "1 mutes a partition while its batch is in flight"),
    "retries": Property(2147483647, MS, "how many times a message is retried"),
    "retry.backoff.ms": Property(100, MS, "wait between retries"),
    "delivery.timeout.ms": Property(120000, POSITIVE, "a message's whole life, send to ack"),
    "buffer.memory": Property(33554432, POSITIVE, "bytes buffered in the producer before send blocks"),
    "max.block.ms": Property(60000, MS, "how long send blocks for buffer memory"),
    "max.request.size": Property(1048576, POSITIVE, "largest message (and request) sent"),
    "partitioner": Property("murmur2_random", _partitioner, "how keys map to partitions"),
    "sticky.partitioning.linger.ms": Property(10, MS, "how long null keys stay on one partition (0: one per message)"),
    "key.serializer": Property("bytes", _serde, ""),
    "value.serializer": Property("bytes", _serde, ""),
    "transactional.id": Property(None, _optional_str, "not supported yet; must stay unset"),
    # consumer and group
    "group.id": Property(None, _optional_str, ""),
    "group.instance.id": Property(None, _optional_str, "static membership"),
    "auto.offset.reset": Property("latest", _choice("earliest", "latest", "none", "smallest", "largest",
                                                     "beginning", "end", "error"), ""),
    "session.timeout.ms": Property(45000, POSITIVE, ""),
    "heartbeat.interval.ms": Property(3000, POSITIVE, ""),
    "rebalance.timeout.ms": Property(300000, POSITIVE, "Java: max.poll.interval.ms"),
    "partition.assignment.strategy": Property("range,roundrobin", _strategies, ""),
    "enable.auto.commit": Property(True, _bool, ""),
    "auto.commit.interval.ms": Property(5000, POSITIVE, ""),
    "fetch.min.bytes": Property(1, POSITIVE, ""),
    "fetch.max.bytes": Property(52428800, POSITIVE, ""),
    "fetch.max.wait.ms": Property(500, MS, ""),
    "max.partition.fetch.bytes": Property(1048576, POSITIVE, ""),
    "isolation.level": Property("read_uncommitted", _choice("read_uncommitted", "read_committed"), ""),
    "check.crcs": Property(True, _bool, "verify record batch CRCs on consume"),
    "topic.metadata.refresh.interval.ms": Property(300000, POSITIVE, "a group member checks its topics' partition counts this often"),
    "max.processing.time.ms": Property(100, POSITIVE, "Sarama's MaxProcessingTime: a partition whose batch is not taken this long pauses"),
    "key.deserializer": Property("bytes", _serde, ""),
    "value.deserializer": Property("bytes", _serde, ""),
}

ALIASES = {"max.poll.interval.ms": "rebalance.timeout.ms", "sasl.mechanisms": "sasl.mechanism",
           "queue.buffering.max.ms": "linger.ms", "compression.codec": "compression.type",
           "request.required.acks": "acks", "metadata.broker.list": "bootstrap.servers"}


class Config(dict):
    """Checked properties with every default filled in; read as `config["linger.ms"]`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name.replace("_", ".")]
        except KeyError:
            raise AttributeError(name) from None


def parse_config(user: Mapping[str, Any] | None, *, require_bootstrap: bool = True, **overrides: Any) -> Config:
    """Check `user` against the table and fill in defaults; raise `ConfigError` naming the bad key."""
    given: dict[str, Any] = dict(user or {})
    given.update({k.replace("_", "."): v for k, v in overrides.items()})
    config = Config({key: prop.default for key, prop in PROPERTIES.items()})
    for key, value in given.items():
        if not isinstance(key, str):
            raise ConfigError(f"config keys are strings, got {key!r}")
        prop = PROPERTIES.get(key)
        if prop is None:
            target = ALIASES.get(key)
            if target is None:
                raise ConfigError(f"{key}: unknown configuration property")
            prop, key = PROPERTIES[target], target
        config[key] = prop.check(key, value)
    if require_bootstrap and not config["bootstrap.servers"]:
        raise ConfigError("bootstrap.servers: required")
    if config["auto.offset.reset"] in ("smallest", "beginning"):
        config["auto.offset.reset"] = "earliest"
    elif config["auto.offset.reset"] in ("largest", "end"):
        config["auto.offset.reset"] = "latest"
    if config["transactional.id"] is not None:
        raise ConfigError("transactional.id: transactions are not supported")
    if "enable.idempotence" not in given and (config["acks"] != -1 or config["retries"] == 0):
        config["enable.idempotence"] = False  # as the Java client: idempotence only by default, and where it can work
    if config["enable.idempotence"] and config["acks"] != -1:
        raise ConfigError("acks: enable.idempotence=true requires acks=all; set enable.idempotence=false to use acks=0 or 1")
    if config["enable.idempotence"] and config["retries"] == 0:
        # a batch the broker refuses leaves a gap in the sequence numbers; only a retry closes it
        raise ConfigError("retries: enable.idempotence=true requires retries > 0; set enable.idempotence=false to use retries=0")
    if config["heartbeat.interval.ms"] >= config["session.timeout.ms"]:
        raise ConfigError("heartbeat.interval.ms: must be lower than session.timeout.ms")
    return config
