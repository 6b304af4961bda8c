"""`sasl.password` and `ssl.key.password` never shown: in a config's repr, a config error (one
that is no mapping too), a SASL credential's repr, or a producer cache key. (Logs and login
errors: tests/security; the consumers' attributes: tests/consumer/test_consumer_secrets.py.)"""

from __future__ import annotations

import json
import logging
import pickle

import pytest

from raykafka.spark_bridge.producer_cache import ProducerCache
from raykafka.wire.config import parse_config
from raykafka.wire.connection import security_from_config
from raykafka.wire.errors import ConfigError

SASL_PASSWORD = "sasl-pw-7f3a9c"
KEY_PASSWORD = "key-pw-51d2e8"


def secret_config(**more) -> dict:
    """Both passwords, each where it is used: SASL over TLS with a client certificate."""
    return {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": SASL_PASSWORD,
            "ssl.certificate.location": "/nonexistent/client.pem", "ssl.key.password": KEY_PASSWORD, **more}


def assert_hidden(text: str) -> None:
    assert SASL_PASSWORD not in text and KEY_PASSWORD not in text, text


def test_a_config_shows_its_passwords_as_hidden():
    config = parse_config(secret_config())
    logged = logging.LogRecord("raykafka", logging.DEBUG, __file__, 1, "config %s", (config,), None).getMessage()
    for text in (repr(config), str(config), f"{config}", logged, repr([config]), repr({"c": config})):
        assert_hidden(text)
        assert "'sasl.password': '[hidden]'" in text and "'ssl.key.password': '[hidden]'" in text
    assert config["sasl.password"] == SASL_PASSWORD and config.sasl_password == SASL_PASSWORD  # still usable
    assert pickle.loads(pickle.dumps(config))["sasl.password"] == SASL_PASSWORD  # as actors receive it
    unset = parse_config({"bootstrap.servers": "127.0.0.1:9092"})
    assert "'sasl.password': None" in repr(unset)  # nothing to hide: not claimed to be set


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password"])
@pytest.mark.parametrize("value", [SASL_PASSWORD.encode(), [SASL_PASSWORD], {"pw": KEY_PASSWORD}, 12345])
def test_a_bad_password_value_is_refused_without_showing_it(key, value):
    with pytest.raises(ConfigError, match=f"{key}: expected a string, got a value of type") as raised:
        parse_config(secret_config(**{key: value}))
    assert_hidden(str(raised.value))
    assert "12345" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None  # no chained text holds it


def test_sasl_credentials_hide_the_password():
    without_tls = {k: v for k, v in secret_config(**{"security.protocol": "sasl_plaintext"}).items()
                   if not k.startswith("ssl.")}  # no certificate to load
    _context, sasl = security_from_config(parse_config(without_tls))
    assert sasl is not None
    assert_hidden(repr(sasl))
    assert_hidden(str(sasl))


def test_producer_cache_keys_hold_no_password_but_tell_passwords_apart():
    key = ProducerCache.key(secret_config())
    assert_hidden(key)
    assert key == ProducerCache.key(dict(reversed(list(secret_config().items()))))  # order does not matter
    assert key != ProducerCache.key(secret_config(**{"sasl.password": "another"}))  # a new password: a new producer
    assert key != ProducerCache.key(secret_config(**{"ssl.key.password": "another"}))


@pytest.mark.parametrize("given", [
    list(secret_config().items()),  # pairs: a dict's items, not a dict
    tuple(secret_config().items()),
    f"sasl.password={SASL_PASSWORD},ssl.key.password={KEY_PASSWORD}",  # a properties line
    json.dumps(secret_config()),  # a dict still in JSON
    {SASL_PASSWORD, KEY_PASSWORD},
], ids=["list", "tuple", "str", "json", "set"])
def test_a_config_that_is_no_mapping_is_refused_without_showing_it(given):
    """A config that is not a mapping may hold the passwords in any form: its error names its
    type and never shows the value."""
    with pytest.raises(ConfigError, match=f"config: expected a dict of Kafka properties, got a value of type "
                                          f"{type(given).__name__}") as raised:
        parse_config(given)
    assert_hidden(str(raised.value))


def test_a_key_that_is_no_string_is_refused_without_showing_it():
    """A key made of a property and its value (a pair, by mistake) is not shown either."""
    with pytest.raises(ConfigError, match="config keys are strings, got a key of type tuple") as raised:
        parse_config({"bootstrap.servers": "127.0.0.1:9092", ("sasl.password", SASL_PASSWORD): True})
    assert_hidden(str(raised.value))


def test_a_parsed_config_is_taken_as_it_is():
    """A `Config` is checked already: parsed again (by an actor its driver gave it to), it comes
    back equal, passwords and all, and a copy, not the driver's own."""
    config = parse_config(secret_config(**{"linger.ms": "7"}))
    again = parse_config(config)
    assert again == config and again is not config and again["sasl.password"] == SASL_PASSWORD
