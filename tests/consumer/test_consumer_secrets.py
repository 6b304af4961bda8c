"""A `Consumer` and a `ConsumerGroup` keep their config parsed (`wire.config.Config`, whose repr
hides the passwords), as a `Producer` does, and no raw copy of it: their repr, their attributes
and a pickle of them show no password. With Ray; no broker (nothing connects while they are built)."""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import pytest
from ray import cloudpickle

from raykafka.driver.consumer import Consumer
from raykafka.driver.consumer_group import ConsumerGroup
from raykafka.wire.config import Config

pytestmark = [pytest.mark.ray]

SASL_PASSWORD = "sasl-pw-7f3a9c"
KEY_PASSWORD = "key-pw-51d2e8"
SECRET_CONFIG = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "sasl_ssl",
                 "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": SASL_PASSWORD,
                 "ssl.certificate.location": "/nonexistent/client.pem", "ssl.key.password": KEY_PASSWORD}


def assert_no_password(obj: object) -> None:
    for text in (repr(obj), str(obj), repr(vars(obj))):
        assert SASL_PASSWORD not in text and KEY_PASSWORD not in text, text
    raw = [name for name, value in vars(obj).items()
           if isinstance(value, Mapping) and not isinstance(value, Config) and SASL_PASSWORD in value.values()]
    assert raw == [], f"the raw config, password and all, in {raw}"
    assert obj.config["sasl.password"] == SASL_PASSWORD  # still there to log in with
    for dumps in (pickle.dumps, cloudpickle.dumps):
        try:
            data = dumps(obj)
        except Exception:  # noqa: BLE001 - refused (threads, locks): nothing shown
            continue
        assert SASL_PASSWORD.encode() not in data and KEY_PASSWORD.encode() not in data


@pytest.mark.parametrize("kind", ["Consumer", "ConsumerGroup"])
def test_no_password_in_the_repr_the_attributes_or_a_pickle(ray_session, kind):
    if kind == "Consumer":
        obj = Consumer(SECRET_CONFIG)
    else:
        obj = ConsumerGroup({**SECRET_CONFIG, "group.id": "g"}, ["t"], lambda batch: None, members=0)
    try:
        assert_no_password(obj)
    finally:
        obj.close()
