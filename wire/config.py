"""Configuration with Kafka's own property names, every default in one table.

A user's confluent-kafka or Java config carries over as it is. `parse_config` checks each
key and value when an object is built and raises `ConfigError` (a `ValueError`) naming the
key, so a typo fails at the point of the mistake, not later in an actor. Values may be given
as strings, as librdkafka takes them (`"linger.ms": "5"`); numbers are bounded as the Java
client's INT properties are (at most 2**31 - 1), so nothing overflows later on the wire or in
a timer. Then the keys are checked together, as the Java client and librdkafka do
(`_check_together`): a combination that would make a key ignored or a request fail is refused,
naming every key involved.

Called by: every object that takes a config (`Producer`, `Consumer`, `ConsumerGroup`, `Admin`,
the actors, the Spark and Ray Data bridges). Calls: nothing but the codec, partitioner and
assignor tables, to check names against them.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, ConfigWarning

Check = Callable[[str, Any], Any]

INT_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE: the bound of its INT properties and of int32 wire fields
LONG_MAX = 2**63 - 1


def _int(low: int | None = None, high: int = INT_MAX) -> Check:
    def check(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if low is not None and number < low:
            raise ConfigError(f"{key}: must be at least {low}, got {number}")
        if number > high:
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


def _transactional_id(key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _secret(key: str, value: Any) -> str | None:
    """A password: a string or unset, and never shown, not even in the error about it."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{key}: expected a string, got a value of type {type(value).__name__}")


def _oauth_cb(key: str, value: Any) -> Any:
    """A callable returning (token, expiry in epoch seconds), or unset. The actors get it in the
    config Ray pickles for them, so one that cannot be pickled is refused here, not there."""
    if value is None:
        return None
    if not callable(value):
        raise ConfigError(f"{key}: expected a callable returning (token, expiry in seconds since the epoch), "
                          f"got a value of type {type(value).__name__}")
    try:
        pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - any failure to pickle means the actors cannot have it
        raise ConfigError(f"{key}: cannot be pickled ({type(exc).__name__}: {exc}), and the actors get it "
                          "pickled: give a module-level function (or a picklable callable object)") from None
    return value


def _choice(*choices: str) -> Check:
    def check(key: str, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).lower() not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(choices)}; got {value!r}")
        return str(value).lower()

    return check


def _acks(key: str, value: Any) -> int:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        text = str(value).strip().lower()
        if text in ("all", "-1"):
            return -1
        if text in ("0", "1"):
            return int(text)
    raise ConfigError(f"{key}: expected 0, 1, -1 or all; got {value!r}")


def _servers(key: str, value: Any) -> list[tuple[str, int]]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{key}: expected host:port[,host:port...], got {value!r}")
    servers = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{key}: expected host:port strings, got {item!r}")
        item = item.strip()
        for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://", "tcp://"):
            if item.upper().startswith(prefix.upper()):
                item = item[len(prefix):]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{key}: {item!r} is not host:port")
        servers.append((host.strip("[]"), int(port)))
    return servers


# Java's class names for the assignors, as a Java config names them
_JAVA_ASSIGNORS = {"org.apache.kafka.clients.consumer.RangeAssignor": "range",
                   "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
                   "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
                   "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky"}


def _strategies(key: str, value: Any) -> tuple[str, ...]:
    """Assignor names, in the order of preference (`cooperative-sticky` is KIP-429's
    incremental protocol: the member keeps what stays its own across a rebalance)."""
    from .assignors import ASSIGNORS

    if isinstance(value, str):
        names: list[Any] = value.split(",")
    elif isinstance(value, (list, tuple)):
        names = list(value)
    else:
        raise ConfigError(f"{key}: expected assignor names, comma-separated or a list; got {value!r}")
    out = []
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(f"{key}: expected assignor names, got {name!r}")
        name = _JAVA_ASSIGNORS.get(name.strip(), name.strip().lower())
        if name not in ASSIGNORS:
            raise ConfigError(f"{key}: unknown assignor {name!r}; supported: {', '.join(ASSIGNORS)}")
        out.append(name)
    if not out:
        raise ConfigError(f"{key}: needs at least one assignor")
    return tuple(out)


def _codec_name(key: str, value: Any) -> str:
    from .compression import Compression

    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a codec name, got {value!r}")
    return Compression.from_name(value).name.lower()


def _partitioner(key: str, value: Any) -> Any:
    if callable(value):
        return value
    from .partitioners import get_partitioner

    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a partitioner name or a callable, got {value!r}")
    get_partitioner(value)
    return value


SERDE_NAMES = ("bytes", "str", "json", "msgpack")


def _serde(key: str, value: Any) -> Any:
    if callable(value) or (isinstance(value, str) and value in SERDE_NAMES):
        return value
    raise ConfigError(f"{key}: expected one of {', '.join(SERDE_NAMES)} or a callable, got {value!r}")


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
    "statistics.interval.ms": Property(0, _int(0, 86400000), "call stats_cb this often (librdkafka); 0: off"),
    "security.protocol": Property("plaintext", _choice("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"), ""),
    "sasl.mechanism": Property("PLAIN", lambda k, v: _choice("plain", "scram-sha-256", "scram-sha-512",
                                                               "oauthbearer")(k, v).upper(), ""),
    "sasl.username": Property(None, _optional_str, ""),
    "sasl.password": Property(None, _secret, "never shown in a repr, a log or an error"),
    "oauth_cb": Property(None, _oauth_cb, "sasl.mechanism=OAUTHBEARER: called with sasl.oauthbearer.config, "
                         "returns (token, expiry in seconds since the epoch); picklable (confluent-kafka)"),
    "sasl.oauthbearer.config": Property(None, _secret, "the string oauth_cb is called with; never shown"),
    "ssl.ca.location": Property(None, _optional_str, "CA bundle to verify the broker with"),
    "ssl.certificate.location": Property(None, _optional_str, "client certificate"),
    "ssl.key.location": Property(None, _optional_str, "client key"),
    "ssl.key.password": Property(None, _secret, "never shown in a repr, a log or an error"),
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
    "delivery.timeout.ms": Property(120000, POSITIVE, "a message's whole life, send to ack; at least linger.ms + request.timeout.ms"),
    "buffer.memory": Property(33554432, _int(1, LONG_MAX), "bytes buffered in the producer before send blocks"),
    "max.block.ms": Property(60000, MS, "how long send blocks for buffer memory"),
    "max.request.size": Property(1048576, POSITIVE, "largest message (and request) sent"),
    "partitioner": Property("murmur2_random", _partitioner, "how keys map to partitions"),
    "sticky.partitioning.linger.ms": Property(10, MS, "how long null keys stay on one partition (0: one per message)"),
    "key.serializer": Property("bytes", _serde, ""),
    "value.serializer": Property("bytes", _serde, ""),
    "transactional.id": Property(None, _transactional_id, "makes the producer transactional (init_transactions, "
                                 "begin/commit/abort_transaction); implies enable.idempotence and acks=all"),
    "transaction.timeout.ms": Property(60000, POSITIVE, "the transaction coordinator aborts a transaction open "
                                       "longer than this (at most the broker's transaction.max.timeout.ms)"),
    "broker.worker.actors": Property(0, _int(0, 1024), "BrokerWorker actors (processes) of a Producer, each hosting "
                                     "the aggregator and flusher of some brokers; 0: the node's CPUs"),
    # consumer and group
    "group.id": Property(None, _optional_str, ""),
    "group.instance.id": Property(None, _optional_str, "static membership"),
    "auto.offset.reset": Property("latest", _choice("earliest", "latest", "none", "smallest", "largest",
                                                     "beginning", "end", "error"), ""),
    "session.timeout.ms": Property(45000, POSITIVE, "above heartbeat.interval.ms, at most rebalance.timeout.ms"),
    "heartbeat.interval.ms": Property(3000, POSITIVE, ""),
    "rebalance.timeout.ms": Property(300000, POSITIVE, "Java: max.poll.interval.ms"),
    "partition.assignment.strategy": Property(("range", "roundrobin"), _strategies, "range, roundrobin, sticky"),
    "enable.auto.commit": Property(True, _bool, ""),
    "auto.commit.interval.ms": Property(5000, POSITIVE, ""),
    "fetch.min.bytes": Property(1, POSITIVE, "at most fetch.max.bytes"),
    "fetch.max.bytes": Property(52428800, POSITIVE, ""),
    "fetch.max.wait.ms": Property(500, MS, "below request.timeout.ms"),
    "max.partition.fetch.bytes": Property(1048576, POSITIVE, ""),
    "isolation.level": Property("read_uncommitted", _choice("read_uncommitted", "read_committed"), ""),
    "check.crcs": Property(True, _bool, "verify record batch CRCs on consume"),
    "max.decompressed.batch.bytes": Property(52428800, POSITIVE, "most bytes one compressed batch may inflate to "
                                             "on consume, else the partition fails (fetch.max.bytes' default)"),
    "topic.metadata.refresh.interval.ms": Property(300000, POSITIVE, "a group member checks its topics' partition counts this often"),
    "max.processing.time.ms": Property(100, POSITIVE, "Sarama's MaxProcessingTime: a partition whose batch is not taken this long pauses"),
    "partition.consumer.actors": Property(1, _int(1, 1024), "PartitionConsumer actors of a Consumer, however many "
                                          "partitions it is assigned; its partitions are spread over them"),
    "broker.consumer.actors": Property(0, _int(0, 1024), "BrokerConsumer actors (processes) of a Consumer, each "
                                       "hosting the fetch loops of some brokers; 0: the CPUs of the driver's node"),
    "key.deserializer": Property("bytes", _serde, "bytes, str, json, msgpack or a callable of one key's bytes"),
    "value.deserializer": Property("bytes", _serde, "bytes, str, json, msgpack or a callable of one value's bytes"),
}

# Which keys each kind of client reads; the rest of the table it ignores. A key given to a client
# that ignores it is named in a `ConfigWarning`, as the Java client ("supplied but isn't a known
# config") and librdkafka ("is a producer property and will be ignored") do: one config dict is
# often shared by a producer and a consumer, so it is not refused.
COMMON_KEYS = frozenset(list(PROPERTIES)[:list(PROPERTIES).index("acks")]) | {"retry.backoff.ms"}
PRODUCER_KEYS = COMMON_KEYS | frozenset(list(PROPERTIES)[list(PROPERTIES).index("acks"):list(PROPERTIES).index("group.id")])
GROUP_ONLY_KEYS = frozenset({"group.id", "group.instance.id", "session.timeout.ms", "heartbeat.interval.ms",
                             "rebalance.timeout.ms", "partition.assignment.strategy", "enable.auto.commit",
                             "auto.commit.interval.ms", "topic.metadata.refresh.interval.ms"})
# read by the Consumer's actors alone
CONSUMER_ONLY_KEYS = frozenset({"partition.consumer.actors", "broker.consumer.actors"})
# read by the long-lived readers (a Consumer's actors, a group member) that pause a partition
# whose handler is behind; a bounded read hands each range out whole and pauses nothing
PAUSING_KEYS = frozenset({"max.processing.time.ms"})
GROUP_KEYS = COMMON_KEYS | (frozenset(PROPERTIES) - PRODUCER_KEYS - CONSUMER_ONLY_KEYS)
CONSUMER_KEYS = (GROUP_KEYS - GROUP_ONLY_KEYS) | CONSUMER_ONLY_KEYS
# a bounded read of the bridges (Ray Data's read, Spark's batch read): read tasks fetch ranges
# themselves, with no actor, no group, and raw columns (no deserializer)
READ_KEYS = CONSUMER_KEYS - CONSUMER_ONLY_KEYS - PAUSING_KEYS - {"key.deserializer", "value.deserializer"}
ROLES: dict[str, tuple[str, frozenset[str]]] = {
    "producer": ("a Producer", PRODUCER_KEYS),
    "consumer": ("a Consumer with assigned partitions (it joins no group and commits nothing)", CONSUMER_KEYS),
    "group": ("a ConsumerGroup", GROUP_KEYS),
    "admin": ("an Admin", COMMON_KEYS - {"statistics.interval.ms"}),  # it takes no stats_cb
    "read": ("a bounded read (its read tasks join no group and commit nothing)", READ_KEYS),
    # a stream reads as a bounded read, batch after batch, and keeps its position as group.id's offsets
    "stream": ("a Kafka stream (it joins no group: group.id only keeps its offsets)", READ_KEYS | {"group.id"}),
    "write": ("a write (each node's writer is a Producer)", PRODUCER_KEYS),
}

ALIASES = {"max.poll.interval.ms": "rebalance.timeout.ms", "sasl.mechanisms": "sasl.mechanism", "oauth.cb": "oauth_cb",
           "queue.buffering.max.ms": "linger.ms", "compression.codec": "compression.type",
           "request.required.acks": "acks", "metadata.broker.list": "bootstrap.servers"}


SECRETS = frozenset({"sasl.password", "ssl.key.password", "sasl.oauthbearer.config"})


class Config(dict):
    """Checked properties with every default filled in; read as `config["linger.ms"]`.

    Its repr shows the passwords in `SECRETS` as `[hidden]` (Java's `Password` prints so).
    """

    def __repr__(self) -> str:
        shown = {k: "[hidden]" if k in SECRETS and v is not None else v for k, v in self.items()}
        return f"Config({shown!r})"

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name.replace("_", ".")]
        except KeyError:
            raise AttributeError(name) from None


def parse_config(user: Mapping[str, Any] | None, *, require_bootstrap: bool = True, role: str | None = None,
                 **overrides: Any) -> Config:
    """Check `user` against the table and fill in defaults; raise `ConfigError` naming the bad key.
    With `role` (a key of `ROLES`), warn of each given key that kind of client does not read.

    A `Config` is checked already: a copy of it comes back (the driver objects hand their parsed
    config to their actors, which parse what they are given). No error shows a value of a key in
    `SECRETS`, nor any part of a config that is no mapping, which may hold them in any form."""
    if isinstance(user, Config) and not overrides:
        return Config(user)
    if user is not None and not isinstance(user, Mapping):
        raise ConfigError(f"config: expected a dict of Kafka properties, got a value of type {type(user).__name__}")
    given = _canonical({**user} if user else {})
    given.update(_canonical({k.replace("_", "."): v for k, v in overrides.items()}))
    config = Config({key: prop.default for key, prop in PROPERTIES.items()})
    for key, (_name, value) in given.items():
        config[key] = PROPERTIES[key].check(key, value)
    if require_bootstrap and not config["bootstrap.servers"]:
        raise ConfigError("bootstrap.servers: required")
    if config["auto.offset.reset"] in ("smallest", "beginning"):
        config["auto.offset.reset"] = "earliest"
    elif config["auto.offset.reset"] in ("largest", "end"):
        config["auto.offset.reset"] = "latest"
    _check_together(config, {key: name for key, (name, _value) in given.items()})
    if role is not None:
        _warn_unused(role, {key: name for key, (name, _value) in given.items()})
    return config


def common_part(user: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `user` that every kind of client reads (connection, security, timeouts)
    and an Admin takes: what a helper Admin of the library's own, such as one looking up a
    consumer's topic or a stream's offsets, is given, so that it warns of no key of the user's."""
    _who, admin_keys = ROLES["admin"]
    return {name: value for name, value in user.items()
            if (name if name in PROPERTIES else ALIASES.get(name)) in admin_keys}


def _warn_unused(role: str, given: dict[str, str]) -> None:
    """One `ConfigWarning` naming every given key that a client of `role` ignores."""
    who, used = ROLES[role]
    unused = sorted(name for key, name in given.items() if key not in used)
    if unused:
        warnings.warn(f"{', '.join(unused)}: not used by {who}; ignored", ConfigWarning, stacklevel=3)


def _canonical(user: Mapping[Any, Any]) -> dict[str, tuple[str, Any]]:
    """Each given key under its table name, with the name it was given as; a key given twice
    (under its name and an alias) with two values is refused, as one of them would be ignored."""
    out: dict[str, tuple[str, Any]] = {}
    for name, value in user.items():
        if not isinstance(name, str):
            raise ConfigError(f"config keys are strings, got a key of type {type(name).__name__}")
        key = name if name in PROPERTIES else ALIASES.get(name)
        if key is None:
            raise ConfigError(f"{name}: unknown configuration property")
        if key in out and out[key][1] != value:
            first, second = ("[hidden]", "[hidden]") if key in SECRETS else (repr(out[key][1]), repr(value))
            raise ConfigError(f"{key}: given twice, as {out[key][0]}={first} and {name}={second}")
        out[key] = (name, value)
    return out


def _check_together(config: Config, given: dict[str, str]) -> None:
    """The cross-key rules of the Java client and librdkafka; `given` maps each key the user set
    to the name it was set as. Each error names every key involved."""

    def named(key: str) -> str:
        return given.get(key, key)

    def refuse(key: str, why: str) -> None:
        raise ConfigError(f"{named(key)}: {why}")

    # producer (Java's ProducerConfig and KafkaProducer.configureDeliveryTimeout)
    if config["transactional.id"] is not None:  # as Java: a transactional producer is an idempotent one
        why = f"{named('transactional.id')} makes the producer transactional, which needs"
        if not config["enable.idempotence"]:
            refuse("enable.idempotence", f"{why} enable.idempotence=true")
        if config["acks"] != -1:
            refuse("acks", f"{why} acks=all")
        if config["retries"] == 0:
            refuse("retries", f"{why} retries > 0")
    least = config["linger.ms"] + config["request.timeout.ms"]
    if config["delivery.timeout.ms"] < least:
        if "delivery.timeout.ms" in given:
            refuse("delivery.timeout.ms", f"must be at least {named('linger.ms')} + {named('request.timeout.ms')} "
                   f"= {least}, got {config['delivery.timeout.ms']}")
        config["delivery.timeout.ms"] = least  # as Java: the default grows to what the other two need
    if "enable.idempotence" not in given and (config["acks"] != -1 or config["retries"] == 0):
        config["enable.idempotence"] = False  # as the Java client: idempotence only by default, and where it can work
    if config["enable.idempotence"] and config["acks"] != -1:
        refuse("acks", "enable.idempotence=true requires acks=all; set enable.idempotence=false to use acks=0 or 1")
    if config["enable.idempotence"] and config["retries"] == 0:
        # a batch the broker refuses leaves a gap in the sequence numbers; only a retry closes it
        refuse("retries", "enable.idempotence=true requires retries > 0; set enable.idempotence=false to use retries=0")
    # consumer and group (Java's Heartbeat and ConsumerConfig, librdkafka's rd_kafka_conf_finalize)
    if config["heartbeat.interval.ms"] >= config["session.timeout.ms"]:
        refuse("heartbeat.interval.ms", f"must be lower than {named('session.timeout.ms')} "
               f"({config['heartbeat.interval.ms']} >= {config['session.timeout.ms']})")
    if config["session.timeout.ms"] > config["rebalance.timeout.ms"]:
        refuse("session.timeout.ms", f"must be at most {named('rebalance.timeout.ms')} "
               f"({config['session.timeout.ms']} > {config['rebalance.timeout.ms']})")
    if config["fetch.min.bytes"] > config["fetch.max.bytes"]:
        refuse("fetch.min.bytes", f"must be at most fetch.max.bytes ({config['fetch.min.bytes']} > "
               f"{config['fetch.max.bytes']})")
    if config["fetch.max.wait.ms"] >= config["request.timeout.ms"]:
        refuse("fetch.max.wait.ms", f"must be lower than {named('request.timeout.ms')} "
               f"({config['fetch.max.wait.ms']} >= {config['request.timeout.ms']}): a Fetch waiting that "
               "long times out before the broker answers it")
    if config["group.id"] is None:
        for key in ("enable.auto.commit", "group.instance.id"):
            if key in given and config[key] not in (None, False):
                refuse(key, "needs group.id (without a group there is nothing to commit to or to join)")
    _check_security(config, given, refuse)


def _check_security(config: Config, given: dict[str, str], refuse: Callable[[str, str], None]) -> None:
    """TLS and SASL keys only where `security.protocol` uses them, and SASL's credentials where it does."""
    protocol = config["security.protocol"]
    tls, sasl = protocol in ("ssl", "sasl_ssl"), protocol.startswith("sasl_")
    for key in given:
        if key.startswith("ssl.") and not tls:
            refuse(key, f"security.protocol={protocol} uses no TLS; set security.protocol=ssl or sasl_ssl")
        if key.startswith("sasl.") and not sasl:
            refuse(key, f"security.protocol={protocol} uses no SASL; set security.protocol=sasl_plaintext or sasl_ssl")
    oauth = config["sasl.mechanism"] == "OAUTHBEARER"
    if "oauth_cb" in given and not (sasl and oauth):
        refuse("oauth_cb", "is used by sasl.mechanism=OAUTHBEARER only (with security.protocol=sasl_plaintext "
               "or sasl_ssl)")
    if sasl and oauth:
        if config["oauth_cb"] is None:
            refuse("oauth_cb", "sasl.mechanism=OAUTHBEARER needs oauth_cb (a callable returning the token and "
                   "its expiry)")
        for key in ("sasl.username", "sasl.password"):
            if key in given:
                refuse(key, "sasl.mechanism=OAUTHBEARER takes its token from oauth_cb, not a user and password")
    elif sasl:
        for key in ("sasl.username", "sasl.password"):
            if config[key] is None:
                refuse(key, f"security.protocol={protocol} needs sasl.username and sasl.password")
    if "sasl.oauthbearer.config" in given and not oauth:
        refuse("sasl.oauthbearer.config", "is used by sasl.mechanism=OAUTHBEARER only")
    for key in ("ssl.key.location", "ssl.key.password"):
        if config[key] is not None and config["ssl.certificate.location"] is None:
            refuse(key, "needs ssl.certificate.location (the client certificate it belongs to)")
