"""Config: Kafka's property names, defaults, and errors that name the key."""

import pytest

from raykafka.wire.config import PROPERTIES, parse_config
from raykafka.wire.errors import ConfigError


def test_defaults_and_bootstrap_parsing():
    config = parse_config({"bootstrap.servers": "a:1, PLAINTEXT://b:2"})
    assert config["bootstrap.servers"] == [("a", 1), ("b", 2)]
    assert config["acks"] == -1
    assert config["enable.idempotence"] is True
    assert config.linger_ms == config["linger.ms"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("linger.msec", 5, "linger.msec: unknown"),
        ("linger.ms", "soon", "linger.ms: expected an integer"),
        ("linger.ms", -1, "linger.ms: must be at least 0"),
        ("acks", 2, "acks: expected 0, 1, -1 or all"),
        ("compression.type", "brotli", "compression.type"),
        ("enable.idempotence", "yes", "enable.idempotence: expected true or false"),
        ("partitioner", "by-moon-phase", "partitioner"),
        ("max.in.flight.requests.per.connection", 6, "at most 5"),
        ("partition.assignment.strategy", "fair", "unknown assignor"),
        ("bootstrap.servers", "nohostport", "is not host:port"),
        ("value.serializer", "yaml", "value.serializer"),
        ("transactional.id", 7, "transactional.id: expected a non-empty string, got 7"),
        ("transactional.id", "", "transactional.id: expected a non-empty string, got ''"),
        ("transaction.timeout.ms", "a minute", "transaction.timeout.ms: expected an integer"),
        ("transaction.timeout.ms", 0, "transaction.timeout.ms: must be at least 1"),
    ],
)
def test_bad_keys_and_values_raise_value_error_naming_the_key(key, value, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_config({"bootstrap.servers": "h:1", key: value})
    assert isinstance(info.value, ConfigError)
    assert key.split(".")[0] in str(info.value)


def test_bootstrap_is_required():
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        parse_config({})


def test_retries_0_turns_default_idempotence_off_and_refuses_it_asked_for():
    """A refused batch leaves a gap in the sequence numbers that only a retry closes (Java's rule)."""
    assert parse_config({"bootstrap.servers": "h:1", "retries": 0})["enable.idempotence"] is False
    assert parse_config({"bootstrap.servers": "h:1", "retries": 1})["enable.idempotence"] is True
    with pytest.raises(ConfigError, match="retries: enable.idempotence=true requires retries > 0"):
        parse_config({"bootstrap.servers": "h:1", "retries": 0, "enable.idempotence": True})


def test_acks_without_idempotence_settings_turns_idempotence_off_as_java_does():
    assert parse_config({"bootstrap.servers": "h:1", "acks": "1"})["enable.idempotence"] is False
    with pytest.raises(ConfigError, match="acks"):
        parse_config({"bootstrap.servers": "h:1", "acks": 1, "enable.idempotence": True})


def test_java_and_librdkafka_aliases_carry_over():
    config = parse_config({"metadata.broker.list": "h:1", "max.poll.interval.ms": 123400,
                           "queue.buffering.max.ms": 7, "auto.offset.reset": "smallest"})
    assert config["rebalance.timeout.ms"] == 123400
    assert config["linger.ms"] == 7
    assert config["auto.offset.reset"] == "earliest"
    assert "max.poll.interval.ms" not in config


# -- every value of a wrong type or range is a ConfigError naming the key, nothing else ----------

INTEGER_KEYS = {k for k, p in PROPERTIES.items() if type(p.default) is int and k != "acks"}
ODD_VALUES = [None, [1], {}, {"a": 1}, object(), float("inf"), float("nan"), 2**70, -(2**70), b"x", "abc",
              True, 1.5, -1, "", 0, ("range",), lambda raw: raw]


@pytest.mark.parametrize("key", sorted(PROPERTIES))
def test_an_odd_value_is_accepted_or_a_config_error_naming_the_key(key):
    for value in ODD_VALUES:
        try:
            config = parse_config({"bootstrap.servers": "h:1", key: value})
        except ConfigError as exc:  # the key's own check, or a rule naming it with another key
            assert key in str(exc), (value, exc)
            continue
        if key in INTEGER_KEYS:
            assert type(config[key]) is int and 0 <= config[key] < 2**63, (value, config[key])


@pytest.mark.parametrize("key", sorted(INTEGER_KEYS))
def test_integers_beyond_java_int_are_refused(key):
    """An int32 on the wire or a timer would overflow later, in an actor: refused here."""
    high = 2**63 - 1 if key == "buffer.memory" else 2**31 - 1
    for value in (2**70, high + 1, float("inf")):
        with pytest.raises(ConfigError, match=f"^{key}: "):
            parse_config({"bootstrap.servers": "h:1", key: value})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("linger.ms", "abc", "linger.ms: expected an integer, got 'abc'"),
        ("linger.ms", -1, "linger.ms: must be at least 0, got -1"),
        ("batch.size", 2**70, "batch.size: must be at most 2147483647"),
        ("acks", [1], "acks: expected 0, 1, -1 or all; got \\[1\\]"),
        ("acks", True, "acks: expected 0, 1, -1 or all; got True"),
        ("partition.assignment.strategy", 3, "partition.assignment.strategy: expected assignor names"),
        ("compression.type", ["gzip"], "compression.type: expected a codec name"),
        ("bootstrap.servers", "h:99999", "bootstrap.servers: 'h:99999' is not host:port"),
    ],
)
def test_the_issues_examples(key, value, message):
    with pytest.raises(ValueError, match=message):
        parse_config({"bootstrap.servers": "h:1", key: value})


def test_strings_of_digits_are_taken_as_librdkafka_takes_them():
    config = parse_config({"bootstrap.servers": "h:1", "linger.ms": "5", "acks": "all", "batch.size": " 1000 ",
                           "compression.type": "GZIP"})
    assert (config["linger.ms"], config["acks"], config["batch.size"], config["compression.type"]) == (5, -1, 1000, "gzip")


def test_a_config_that_is_not_a_mapping_is_a_config_error():
    for value in ("h:1", [("bootstrap.servers", "h:1")], 5):
        with pytest.raises(ConfigError, match="^config: expected a dict"):
            parse_config(value)


def test_a_key_given_twice_under_an_alias_with_two_values_is_refused():
    with pytest.raises(ConfigError, match="linger.ms: given twice, as linger.ms=5 and queue.buffering.max.ms=50"):
        parse_config({"bootstrap.servers": "h:1", "linger.ms": 5, "queue.buffering.max.ms": 50})
    with pytest.raises(ConfigError, match="given twice"):
        parse_config({"bootstrap.servers": "h:1", "linger.ms": 5, "queue.buffering.max.ms": "5"})
    assert parse_config({"bootstrap.servers": "h:1", "linger.ms": 7, "queue.buffering.max.ms": 7})["linger.ms"] == 7


# -- cooperative-sticky (KIP-429): taken by name and by Java's class name -------------------------

@pytest.mark.parametrize(("value", "parsed"), [
    ("cooperative-sticky", ("cooperative-sticky",)),
    ("range,cooperative-sticky", ("range", "cooperative-sticky")),
    ("org.apache.kafka.clients.consumer.CooperativeStickyAssignor", ("cooperative-sticky",))])
def test_cooperative_sticky_is_taken(value, parsed):
    config = parse_config({"bootstrap.servers": "h:1", "group.id": "g", "partition.assignment.strategy": value})
    assert config["partition.assignment.strategy"] == parsed


def test_an_unknown_strategy_is_refused_naming_the_supported_ones():
    with pytest.raises(ConfigError, match="partition.assignment.strategy: unknown assignor 'sticky-ish'; "
                                          "supported: range, roundrobin, sticky, cooperative-sticky"):
        parse_config({"bootstrap.servers": "h:1", "group.id": "g", "partition.assignment.strategy": "sticky-ish"})


def test_strategies_by_name_and_by_java_class_name():
    config = parse_config({"bootstrap.servers": "h:1", "partition.assignment.strategy":
                           "org.apache.kafka.clients.consumer.StickyAssignor, RANGE"})
    assert config["partition.assignment.strategy"] == ("sticky", "range")
    assert parse_config({"bootstrap.servers": "h:1"})["partition.assignment.strategy"] == ("range", "roundrobin")


# -- the keys checked together, as the Java client and librdkafka do -------------------------------

@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"delivery.timeout.ms": 1000}, "delivery.timeout.ms: must be at least linger.ms \\+ request.timeout.ms = 30005, got 1000"),
        ({"delivery.timeout.ms": 30000, "queue.buffering.max.ms": 10},
         "delivery.timeout.ms: must be at least queue.buffering.max.ms \\+ request.timeout.ms = 30010"),
        ({"enable.idempotence": True, "acks": 0}, "acks: enable.idempotence=true requires acks=all"),
        ({"enable.idempotence": True, "retries": 0}, "retries: enable.idempotence=true requires retries > 0"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight.requests.per.connection: must be at most 5"),
        ({"heartbeat.interval.ms": 45000}, "heartbeat.interval.ms: must be lower than session.timeout.ms \\(45000 >= 45000\\)"),
        ({"session.timeout.ms": 60000, "max.poll.interval.ms": 50000},
         "session.timeout.ms: must be at most max.poll.interval.ms \\(60000 > 50000\\)"),
        ({"fetch.min.bytes": 2000, "fetch.max.bytes": 1000}, "fetch.min.bytes: must be at most fetch.max.bytes"),
        ({"fetch.max.wait.ms": 30000}, "fetch.max.wait.ms: must be lower than request.timeout.ms \\(30000 >= 30000\\)"),
        ({"enable.auto.commit": "true"}, "enable.auto.commit: needs group.id"),
        ({"group.instance.id": "static-1"}, "group.instance.id: needs group.id"),
        ({"ssl.ca.location": "/ca.pem"}, "ssl.ca.location: security.protocol=plaintext uses no TLS"),
        ({"security.protocol": "sasl_plaintext", "sasl.username": "u", "sasl.password": "p",
          "ssl.ca.location": "/ca.pem"}, "ssl.ca.location: security.protocol=sasl_plaintext uses no TLS"),
        ({"sasl.username": "u", "sasl.password": "p"}, "sasl.username: security.protocol=plaintext uses no SASL"),
        ({"security.protocol": "ssl", "sasl.mechanisms": "PLAIN"}, "sasl.mechanisms: security.protocol=ssl uses no SASL"),
        ({"security.protocol": "sasl_ssl", "sasl.username": "u"}, "sasl.password: security.protocol=sasl_ssl needs"),
        ({"security.protocol": "ssl", "ssl.key.location": "/key.pem"}, "ssl.key.location: needs ssl.certificate.location"),
        ({"transactional.id": "t", "acks": 1},
         "acks: transactional.id makes the producer transactional, which needs acks=all"),
        ({"transactional.id": "t", "enable.idempotence": False},
         "enable.idempotence: transactional.id makes the producer transactional, which needs enable.idempotence=true"),
        ({"transactional.id": "t", "retries": 0},
         "retries: transactional.id makes the producer transactional, which needs retries > 0"),
    ],
)
def test_keys_checked_together_name_every_key_involved(given, message):
    with pytest.raises(ConfigError, match="^" + message):
        parse_config({"bootstrap.servers": "h:1", **given})


def test_a_transactional_producer_is_idempotent_with_acks_all_as_java():
    config = parse_config({"bootstrap.servers": "h:1", "transactional.id": "orders-1"}, role="producer")
    assert (config["transactional.id"], config["enable.idempotence"], config["acks"]) == ("orders-1", True, -1)
    assert config["transaction.timeout.ms"] == 60000
    assert parse_config({"bootstrap.servers": "h:1"})["transactional.id"] is None


def test_an_unset_delivery_timeout_grows_to_linger_plus_request_timeout_as_java_does():
    config = parse_config({"bootstrap.servers": "h:1", "linger.ms": 100, "request.timeout.ms": 200_000})
    assert config["delivery.timeout.ms"] == 200_100
    assert parse_config({"bootstrap.servers": "h:1"})["delivery.timeout.ms"] == 120_000


def test_keys_that_work_together_pass():
    config = parse_config({"bootstrap.servers": "h:1", "group.id": "g", "enable.auto.commit": True,
                           "group.instance.id": "m-1", "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                           "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem",
                           "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "fetch.max.wait.ms": 100,
                           "delivery.timeout.ms": 30005})
    assert config["sasl.mechanism"] == "SCRAM-SHA-512" and config["delivery.timeout.ms"] == 30005


@pytest.mark.parametrize(("role", "given", "named"), [
    ("consumer", {"group.id": "g", "enable.auto.commit": True}, "enable.auto.commit, group.id"),
    ("consumer", {"linger.ms": 5}, "linger.ms"),
    ("group", {"transactional.id": "t", "transaction.timeout.ms": 9000}, "transaction.timeout.ms, transactional.id"),
    ("group", {"acks": "all", "compression.type": "lz4"}, "acks, compression.type"),
    ("producer", {"auto.offset.reset": "earliest", "group.id": "g"}, "auto.offset.reset, group.id"),
    ("admin", {"linger.ms": 5, "fetch.max.bytes": 1024}, "fetch.max.bytes, linger.ms"),
    ("admin", {"statistics.interval.ms": 1000}, "statistics.interval.ms"),
    ("read", {"max.processing.time.ms": 200}, "max.processing.time.ms"),
    ("read", {"linger.ms": 5, "group.id": "g"}, "group.id, linger.ms"),
    ("read", {"partition.consumer.actors": 2}, "partition.consumer.actors"),
    ("group", {"broker.consumer.actors": 2}, "broker.consumer.actors"),
    ("stream", {"session.timeout.ms": 6000, "acks": "all"}, "acks, session.timeout.ms"),
    ("write", {"session.timeout.ms": 6000}, "session.timeout.ms"),
])
def test_a_key_the_client_does_not_read_is_named_in_a_warning(role, given, named):
    from raykafka.wire.errors import ConfigWarning

    with pytest.warns(ConfigWarning, match=rf"^{named}: not used by ") as caught:
        parse_config({"bootstrap.servers": "k:9092", **given}, role=role)
    assert len(caught) == 1


@pytest.mark.parametrize("role", ["producer", "consumer", "group", "admin", "read", "stream", "write"])
def test_keys_each_client_reads_raise_no_warning(role):
    import warnings

    from raykafka.wire.config import ROLES

    given = {"bootstrap.servers": "k:9092", "client.id": "c", "retry.backoff.ms": 50, "request.timeout.ms": 20000}
    given.update({"producer": {"linger.ms": 1, "acks": "all"}, "consumer": {"fetch.max.bytes": 1 << 20, "max.processing.time.ms": 200},
                  "group": {"group.id": "g", "fetch.max.bytes": 1 << 20, "max.processing.time.ms": 200},
                  "admin": {},
                  "read": {"isolation.level": "read_committed"}, "stream": {"group.id": "g", "fetch.max.bytes": 1 << 20},
                  "write": {"linger.ms": 1, "enable.idempotence": True}}[role])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_config(given, role=role)
    assert set(ROLES) == {"producer", "consumer", "group", "admin", "read", "stream", "write"}


def test_common_part_keeps_what_every_client_reads_under_the_name_given():
    from raykafka.wire.config import common_part

    given = {"metadata.broker.list": "k:9092", "sasl.mechanisms": "PLAIN", "group.id": "g", "linger.ms": 5,
             "retry.backoff.ms": 10, "statistics.interval.ms": 1000}  # an Admin takes no stats_cb
    assert common_part(given) == {"metadata.broker.list": "k:9092", "sasl.mechanisms": "PLAIN", "retry.backoff.ms": 10}


def test_the_bridges_entry_points_warn_of_a_key_they_do_not_read():
    """A write given a consumer's key, and a stream given a producer's, say so where they are
    built; a stream's group.id is its own and is not handed to each batch's read."""
    from raykafka.spark_bridge.ray_data import KafkaDatasink
    from raykafka.spark_bridge.streaming import KafkaStream
    from raykafka.wire.errors import ConfigWarning

    with pytest.warns(ConfigWarning, match=r"^session.timeout.ms: not used by a write"):
        KafkaDatasink("t", {"bootstrap.servers": "k:9092", "session.timeout.ms": 6000})
    with pytest.warns(ConfigWarning, match=r"^linger.ms: not used by a Kafka stream"):
        stream = KafkaStream(["t"], {"bootstrap.servers": "k:9092", "group.id": "g", "linger.ms": 5})
    assert "group.id" not in stream.read_config and stream.read_config["linger.ms"] == 5
