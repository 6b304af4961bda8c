"""Errors keep what they say when Ray carries them between actors (pickled)."""

from __future__ import annotations

import pickle

import pytest

from raykafka.wire.errors import (
    BrokerError,
    DeliveryTimeoutError,
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
    TransactionTimeoutError,
)


@pytest.mark.parametrize("args", [(45, "producer/broker/1: produce to t/0"), (10, "", "over 1 MB"), (999, "ctx")])
def test_a_broker_error_crosses_pickling_with_its_code_and_its_text(args):
    error = BrokerError(*args)
    twice = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(error))))  # two actor hops
    assert type(twice) is BrokerError
    assert str(twice) == str(error)
    assert (twice.code, twice.name, twice.retriable) == (error.code, error.name, error.retriable)
    assert "UNKNOWN_ERROR_CODE" not in str(twice) or args[0] == 999


def test_other_errors_cross_pickling_as_they_were():
    for error in (MessageTooLargeError("larger than max.request.size"), DeliveryTimeoutError("not delivered")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
    assert isinstance(pickle.loads(pickle.dumps(MessageTooLargeError("x"))), ValueError)


@pytest.mark.parametrize("kind", [ProducerFencedError, TransactionFatalError, TransactionAbortableError,
                                  TransactionStateError, TransactionTimeoutError])
def test_transaction_errors_cross_pickling_with_their_code(kind):
    error = kind("transactional.id 't': EndTxn: PRODUCER_FENCED (90)", 90 if kind is not TransactionStateError else None)
    again = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(error))))
    assert type(again) is kind and str(again) == str(error)
    assert (again.code, again.name, again.retriable) == (error.code, error.name, kind is TransactionTimeoutError)
