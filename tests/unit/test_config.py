"""Config: Kafka's property names, defaults, and errors that name the key."""

import pytest

from raykafka.wire.config import parse_config
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
    config = parse_config({"metadata.broker.list": "h:1", "max.poll.interval.ms": 1234,
                           "queue.buffering.max.ms": 7, "auto.offset.reset": "smallest"})
    assert config["rebalance.timeout.ms"] == 1234
    assert config["linger.ms"] == 7
    assert config["auto.offset.reset"] == "earliest"
    assert "max.poll.interval.ms" not in config
