"""The transaction state machine (no I/O), every call from every state; the error classes; and
`TransactionCoordinator`'s retries against a scripted coordinator."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from raykafka.wire import messages
from raykafka.wire.admin import TopicPartition
from raykafka.wire.errors import (
    BY_NAME,
    BrokerConnectionError,
    BrokerError,
    ConfigError,
    DeliveryTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
    TransactionTimeoutError,
    UnsupportedVersionError,
)
from raykafka.wire.protocol import Struct
from raykafka.wire.transactions import (
    Action,
    TransactionCoordinator,
    TransactionManager,
    TxnState,
    classify,
    failed_send,
    send_error,
)

S = TxnState
CODE = {name: BY_NAME[name].code for name in BY_NAME}
TP = TopicPartition("t", 0)


def abortable() -> TransactionAbortableError:
    return TransactionAbortableError("topic not authorized", CODE["TOPIC_AUTHORIZATION_FAILED"])


def fatal() -> TransactionFatalError:
    return ProducerFencedError("fenced", CODE["PRODUCER_FENCED"])


# Each call, as the manager is driven; written out from Java's State.isTransitionValid.
CALLS = {
    "init_transactions": lambda m: m.start_init(),
    "initialized": lambda m: m.initialized(7, 0),
    "begin_transaction": lambda m: m.begin(),
    "commit_transaction": lambda m: m.start_commit(),
    "abort_transaction": lambda m: m.start_abort(),
    "completed": lambda m: m.completed(),
    "abortable_error": lambda m: m.fail(abortable()),
    "fatal_error": lambda m: m.fail(fatal()),
}
LEGAL = {  # (call, from) -> to
    ("init_transactions", S.UNINITIALIZED): S.INITIALIZING,
    ("init_transactions", S.INITIALIZING): S.INITIALIZING,
    ("initialized", S.INITIALIZING): S.READY,
    ("begin_transaction", S.READY): S.IN_TRANSACTION,
    ("commit_transaction", S.IN_TRANSACTION): S.COMMITTING,
    ("commit_transaction", S.COMMITTING): S.COMMITTING,
    ("abort_transaction", S.IN_TRANSACTION): S.ABORTING,
    ("abort_transaction", S.ABORTABLE_ERROR): S.ABORTING,
    ("abort_transaction", S.ABORTING): S.ABORTING,
    ("completed", S.COMMITTING): S.READY,
    ("completed", S.ABORTING): S.READY,
    ("abortable_error", S.IN_TRANSACTION): S.ABORTABLE_ERROR,
    ("abortable_error", S.COMMITTING): S.ABORTABLE_ERROR,
    ("abortable_error", S.ABORTABLE_ERROR): S.ABORTABLE_ERROR,
    ("abortable_error", S.ABORTING): S.ABORTING,  # moot while aborting
    **{("fatal_error", s): S.FATAL_ERROR for s in TxnState},
}


def manager_in(state: TxnState) -> TransactionManager:
    m = TransactionManager("txn-1", 60_000)
    m.state = state
    if state is S.FATAL_ERROR:
        m.last_error = TransactionFatalError("an earlier fatal error", CODE["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"])
    if state is S.ABORTABLE_ERROR:
        m.last_error = abortable()
    return m


@pytest.mark.parametrize(("call", "state"), list(itertools.product(CALLS, TxnState)),
                         ids=lambda x: x if isinstance(x, str) else x.value)
def test_every_call_from_every_state(call: str, state: TxnState) -> None:
    m = manager_in(state)
    expected = LEGAL.get((call, state))
    if expected is not None:
        CALLS[call](m)
        assert m.state is expected
    elif state is S.FATAL_ERROR:
        with pytest.raises(TransactionFatalError, match="an earlier fatal error"):
            CALLS[call](m)
        assert m.state is S.FATAL_ERROR
    else:
        with pytest.raises(TransactionStateError, match=f"not legal in state {state.value}"):
            CALLS[call](m)
        assert m.state is state


def test_a_whole_life_keeps_id_epoch_partitions_and_offsets() -> None:
    m = TransactionManager("txn-1", 60_000)
    m.start_init()
    m.initialized(42, 3)
    assert (m.producer_id, m.producer_epoch, m.state) == (42, 3, S.READY)
    m.begin()
    assert not m.started
    assert m.partitions_to_add([TP, TopicPartition("t", 1)]) == [TP, TopicPartition("t", 1)]
    m.partitions_added([TP])
    assert m.partitions_to_add([TP, TopicPartition("t", 1)]) == [TopicPartition("t", 1)]
    assert m.is_send_allowed(TP) and not m.is_send_allowed(TopicPartition("t", 1))
    m.group_added("g")
    m.offsets_added("g", {TP: 5})
    assert m.started
    m.start_commit()
    assert not m.is_send_allowed(TP)
    m.completed()
    assert (m.partitions, m.groups, m.offsets, m.state) == (set(), set(), {}, S.READY)
    assert (m.producer_id, m.producer_epoch) == (42, 3)


@pytest.mark.parametrize("state", [s for s in TxnState if s is not S.IN_TRANSACTION], ids=lambda s: s.value)
def test_partition_and_offset_calls_need_a_transaction(state: TxnState) -> None:
    m = manager_in(state)
    error = TransactionFatalError if state is S.FATAL_ERROR else TransactionStateError
    for call in (m.partitions_to_add, m.partitions_added):
        with pytest.raises(error):
            call([TP])
    with pytest.raises(error):
        m.check_send_offsets("g")
    with pytest.raises(error):
        m.offsets_added("g", {})
    assert not m.is_send_allowed(TP)


def test_commit_after_an_abortable_error_names_the_cause() -> None:
    m = manager_in(S.IN_TRANSACTION)
    m.fail(abortable())
    with pytest.raises(TransactionStateError, match="topic not authorized"):
        m.start_commit()
    m.start_abort()
    m.completed()
    assert m.state is S.READY and m.last_error is None


def test_a_fatal_error_is_kept_and_raised_by_every_later_call() -> None:
    m = manager_in(S.IN_TRANSACTION)
    first = m.fail(fatal())
    assert m.fail(TransactionFatalError("later", CODE["INVALID_TXN_STATE"])) is first
    with pytest.raises(ProducerFencedError, match="fenced"):
        m.start_abort()


def test_an_empty_transactional_id_is_refused() -> None:
    with pytest.raises(ConfigError, match="transactional.id"):
        TransactionManager("", 60_000)


@pytest.mark.parametrize(("api", "name", "action"), [
    (messages.END_TXN, "COORDINATOR_NOT_AVAILABLE", Action.FIND_COORDINATOR),
    (messages.INIT_PRODUCER_ID, "NOT_COORDINATOR", Action.FIND_COORDINATOR),
    (messages.END_TXN, "CONCURRENT_TRANSACTIONS", Action.RETRY),
    (messages.ADD_OFFSETS_TO_TXN, "COORDINATOR_LOAD_IN_PROGRESS", Action.RETRY),
    (messages.ADD_PARTITIONS_TO_TXN, "UNKNOWN_TOPIC_OR_PARTITION", Action.RETRY),
    (messages.TXN_OFFSET_COMMIT, "REQUEST_TIMED_OUT", Action.FIND_COORDINATOR),
    (messages.END_TXN, "PRODUCER_FENCED", Action.FATAL),
    (messages.ADD_PARTITIONS_TO_TXN, "INVALID_PRODUCER_EPOCH", Action.FATAL),
    (messages.INIT_PRODUCER_ID, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", Action.FATAL),
    (messages.ADD_PARTITIONS_TO_TXN, "INVALID_PRODUCER_ID_MAPPING", Action.FATAL),
    (messages.END_TXN, "INVALID_TXN_STATE", Action.FATAL),
    (messages.INIT_PRODUCER_ID, "UNSUPPORTED_VERSION", Action.FATAL),
    (messages.ADD_PARTITIONS_TO_TXN, "TOPIC_AUTHORIZATION_FAILED", Action.ABORTABLE),
    (messages.ADD_PARTITIONS_TO_TXN, "OPERATION_NOT_ATTEMPTED", Action.ABORTABLE),
    (messages.ADD_PARTITIONS_TO_TXN, "MESSAGE_TOO_LARGE", Action.ABORTABLE),  # any other partition error
    (messages.ADD_OFFSETS_TO_TXN, "GROUP_AUTHORIZATION_FAILED", Action.ABORTABLE),
    (messages.END_TXN, "MESSAGE_TOO_LARGE", Action.FATAL),  # unexpected: fatal
    # the offsets' group metadata is stale (a rebalance came first): the transaction aborts, the producer goes on
    (messages.TXN_OFFSET_COMMIT, "ILLEGAL_GENERATION", Action.ABORTABLE),
    (messages.TXN_OFFSET_COMMIT, "UNKNOWN_MEMBER_ID", Action.ABORTABLE),
    (messages.TXN_OFFSET_COMMIT, "FENCED_INSTANCE_ID", Action.ABORTABLE),
    (messages.END_TXN, "ILLEGAL_GENERATION", Action.FATAL),
])
def test_errors_are_classified_as_java_does(api: messages.Api, name: str, action: Action) -> None:
    assert classify(api, CODE[name]) is action


def test_a_failed_send_is_abortable_unless_fenced_or_unauthorized() -> None:
    assert type(send_error(CODE["NOT_ENOUGH_REPLICAS"], "send")) is TransactionAbortableError
    assert type(send_error(CODE["TOPIC_AUTHORIZATION_FAILED"], "send")) is TransactionAbortableError
    assert type(send_error(CODE["PRODUCER_FENCED"], "send")) is ProducerFencedError
    assert type(send_error(CODE["INVALID_PRODUCER_EPOCH"], "send")) is ProducerFencedError
    error = send_error(CODE["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"], "send")
    assert type(error) is TransactionFatalError and error.name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


def test_a_failed_message_names_what_it_makes_of_the_transaction() -> None:
    """What the producer's commit makes of the first message of the transaction that failed."""
    fenced = ProducerFencedError("produce: fenced", CODE["PRODUCER_FENCED"])
    assert failed_send(fenced, "commit") is fenced  # named by the flusher already: kept
    broker = failed_send(BrokerError(CODE["INVALID_PRODUCER_EPOCH"], "produce to t/0"), "commit")
    assert type(broker) is ProducerFencedError and "produce to t/0" in str(broker)
    assert type(failed_send(BrokerError(CODE["NOT_ENOUGH_REPLICAS"]), "commit")) is TransactionAbortableError
    local = failed_send(DeliveryTimeoutError("not delivered within delivery.timeout.ms=100"), "commit")
    assert type(local) is TransactionAbortableError and "DeliveryTimeoutError" in str(local)


# -- TransactionCoordinator against a scripted coordinator --------------------


class ScriptedConnection:
    """Answers each request with the next scripted answer for its API (an error code, or an
    exception to raise)."""

    def __init__(self, script: dict[Any, list[Any]]):
        self.script = script
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def version_for(self, api: messages.Api) -> int:
        if api.key in self.script.get("unsupported", ()):
            raise UnsupportedVersionError(f"broker 1 does not support {api.name}")
        return api.max_version

    async def request(self, api: messages.Api, body: dict[str, Any], version: int, timeout: float) -> Struct:
        self.requests.append((api.name, body))
        answer = self.script[api.key].pop(0) if self.script.get(api.key) else 0
        if isinstance(answer, Exception):
            raise answer
        if api is messages.INIT_PRODUCER_ID:
            return Struct(error_code=answer, producer_id=1000, producer_epoch=4)
        if api is messages.ADD_PARTITIONS_TO_TXN:
            assert version <= 3
            return Struct(results_by_topic_v3_and_below=[Struct(name=t["name"], results_by_partition=[
                Struct(partition_index=p, partition_error_code=answer) for p in t["partitions"]])
                for t in body["v3_and_below_topics"]])
        if api is messages.TXN_OFFSET_COMMIT:
            return Struct(topics=[Struct(name=t["name"], partitions=[
                Struct(partition_index=p["partition_index"], error_code=answer) for p in t["partitions"]])
                for t in body["topics"]])
        return Struct(error_code=answer)


class ScriptedCluster:
    def __init__(self, script: dict[Any, list[Any]]):
        self.conn = ScriptedConnection(script)
        self.config = {"max.block.ms": 2000, "retry.backoff.ms": 1}
        self.lookups: list[tuple[str, int]] = []
        self.forgotten = 0

    async def coordinator(self, key: str, key_type: int = 0) -> ScriptedConnection:
        self.lookups.append((key, key_type))
        if self.conn.script.get("find"):
            raise self.conn.script["find"].pop(0)
        return self.conn

    def forget_coordinator(self, key: str, key_type: int = 0) -> None:
        self.forgotten += 1


def run(script: dict[Any, list[Any]], steps: Any, timeout_ms: int | None = None) -> tuple[TransactionCoordinator, ScriptedCluster]:
    cluster = ScriptedCluster(script)
    txn = TransactionCoordinator(cluster, TransactionManager("txn-1", 30_000), timeout_ms=timeout_ms)  # type: ignore[arg-type]
    asyncio.run(steps(txn))
    return txn, cluster


def test_a_transaction_speaks_to_both_coordinators_in_order() -> None:
    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.add_partitions([TP, TopicPartition("u", 2)])
        await txn.add_partitions([TP])  # held already: no request
        await txn.send_offsets({TopicPartition("in", 0): 17}, "g", generation_id=3, member_id="m")
        await txn.commit_transaction()

    txn, cluster = run({}, steps)
    names = [n for n, _ in cluster.conn.requests]
    assert names == ["InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn"]
    init, add, _offsets, commit, end = (b for _, b in cluster.conn.requests)
    assert (init["transactional_id"], init["transaction_timeout_ms"]) == ("txn-1", 30_000)
    assert add["v3_and_below_topics"] == [{"name": "t", "partitions": [0]}, {"name": "u", "partitions": [2]}]
    assert (add["v3_and_below_producer_id"], add["v3_and_below_producer_epoch"]) == (1000, 4)
    assert commit["topics"][0]["partitions"][0]["committed_offset"] == 17 and commit["generation_id"] == 3
    assert end["committed"] is True
    assert ("g", 0) in cluster.lookups and ("txn-1", 1) in cluster.lookups
    assert txn.manager.state is S.READY


def test_a_transaction_that_added_nothing_ends_without_end_txn() -> None:
    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.abort_transaction()

    txn, cluster = run({}, steps)
    assert [n for n, _ in cluster.conn.requests] == ["InitProducerId"]
    assert txn.manager.state is S.READY


def test_retriable_errors_are_retried_and_the_coordinator_looked_up_again() -> None:
    script = {messages.INIT_PRODUCER_ID.key: [CODE["COORDINATOR_LOAD_IN_PROGRESS"], CODE["NOT_COORDINATOR"],
                                               BrokerConnectionError("dropped"), 0],
              messages.ADD_PARTITIONS_TO_TXN.key: [CODE["CONCURRENT_TRANSACTIONS"], 0]}

    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.add_partitions([TP])

    txn, cluster = run(script, steps)
    assert [n for n, _ in cluster.conn.requests].count("InitProducerId") == 4
    assert cluster.forgotten == 2  # NOT_COORDINATOR and the dropped connection
    assert txn.manager.partitions == {TP}


def test_retries_end_at_the_timeout_and_the_call_may_be_made_again() -> None:
    script = {messages.END_TXN.key: [CODE["CONCURRENT_TRANSACTIONS"]] * 10_000}

    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.add_partitions([TP])
        with pytest.raises(TransactionTimeoutError, match="EndTxn: no success within 200 ms.*CONCURRENT_TRANSACTIONS"):
            await txn.commit_transaction()
        assert txn.manager.state is S.COMMITTING
        script[messages.END_TXN.key].clear()
        await txn.commit_transaction()

    txn, _cluster = run(script, steps, timeout_ms=200)
    assert txn.manager.state is S.READY


def test_fenced_end_txn_is_fatal_for_good() -> None:
    script = {messages.END_TXN.key: [CODE["PRODUCER_FENCED"]]}

    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.add_partitions([TP])
        with pytest.raises(ProducerFencedError, match="EndTxn: PRODUCER_FENCED"):
            await txn.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await txn.abort_transaction()

    txn, _cluster = run(script, steps)
    assert txn.manager.state is S.FATAL_ERROR


def test_an_unauthorized_topic_makes_the_transaction_abortable() -> None:
    script = {messages.ADD_PARTITIONS_TO_TXN.key: [CODE["TOPIC_AUTHORIZATION_FAILED"]]}

    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        with pytest.raises(TransactionAbortableError, match="TOPIC_AUTHORIZATION_FAILED"):
            await txn.add_partitions([TP])
        with pytest.raises(TransactionStateError):
            await txn.commit_transaction()
        await txn.abort_transaction()
        txn.begin_transaction()

    txn, _cluster = run(script, steps)
    assert txn.manager.state is S.IN_TRANSACTION


def test_a_coordinator_the_producer_may_not_use_is_fatal() -> None:
    """FindCoordinator answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (after one that was
    not available yet, retried)."""
    script: dict[Any, list[Any]] = {"find": [BrokerError(CODE["COORDINATOR_NOT_AVAILABLE"], "FindCoordinator"),
                                             BrokerError(CODE["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"], "FindCoordinator")]}

    async def steps(txn: TransactionCoordinator) -> None:
        with pytest.raises(TransactionFatalError, match="InitProducerId: TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
            await txn.init_transactions()

    txn, cluster = run(script, steps)
    assert len(cluster.lookups) == 2 and cluster.conn.requests == []
    assert txn.manager.state is S.FATAL_ERROR


def test_a_broker_without_the_api_is_fatal() -> None:
    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.send_offsets({TP: 1}, "g")
        with pytest.raises(TransactionFatalError, match="does not support EndTxn") as error:
            await txn.commit_transaction()
        assert error.value.name == "UNSUPPORTED_VERSION"

    txn, _cluster = run({"unsupported": [messages.END_TXN.key]}, steps)
    assert txn.manager.state is S.FATAL_ERROR


def test_txn_offset_commit_finds_the_group_coordinator_again_and_a_refused_group_aborts() -> None:
    script = {messages.TXN_OFFSET_COMMIT.key: [CODE["REQUEST_TIMED_OUT"], 0, CODE["GROUP_AUTHORIZATION_FAILED"]]}

    async def steps(txn: TransactionCoordinator) -> None:
        await txn.init_transactions()
        txn.begin_transaction()
        await txn.send_offsets({TP: 1}, "g")
        with pytest.raises(TransactionAbortableError, match="TxnOffsetCommit: GROUP_AUTHORIZATION_FAILED"):
            await txn.send_offsets({TP: 2}, "g")  # the group is added already: no AddOffsetsToTxn
        await txn.abort_transaction()

    txn, cluster = run(script, steps)
    names = [n for n, _ in cluster.conn.requests]
    assert names == ["InitProducerId", "AddOffsetsToTxn", "TxnOffsetCommit", "TxnOffsetCommit", "TxnOffsetCommit",
                     "EndTxn"]
    assert cluster.forgotten == 1 and cluster.lookups.count(("g", 0)) == 3
    assert txn.manager.state is S.READY


def test_a_coordinator_that_drops_every_request_ends_in_a_timeout_naming_it() -> None:
    script = {messages.INIT_PRODUCER_ID.key: [BrokerConnectionError("closed by the broker")] * 10_000}

    async def steps(txn: TransactionCoordinator) -> None:
        with pytest.raises(TransactionTimeoutError, match="InitProducerId: no success within 200 ms.*closed by the broker"):
            await txn.init_transactions()
        assert txn.manager.state is S.INITIALIZING
        script[messages.INIT_PRODUCER_ID.key].clear()
        await txn.init_transactions()  # the same call again

    txn, _cluster = run(script, steps, timeout_ms=200)
    assert txn.manager.state is S.READY


# -- TransactionOwner (the actor's class, without Ray) over a scripted coordinator --------------


def owner_over(script: dict[Any, list[Any]], **config: Any) -> tuple[Any, ScriptedCluster]:
    from types import SimpleNamespace

    from raykafka.actors.transaction_owner import TransactionOwner
    from raykafka.wire.config import parse_config

    owner = TransactionOwner(SimpleNamespace(config=parse_config({"bootstrap.servers": "h:1",
                                                                  "transactional.id": "txn-1", **config})))
    owner.cluster = ScriptedCluster(script)
    owner.coordinator = TransactionCoordinator(owner.cluster, owner.manager)  # type: ignore[arg-type]
    return owner, owner.cluster


def test_the_owner_refuses_to_commit_a_transaction_whose_message_failed_until_it_is_aborted() -> None:
    owner, cluster = owner_over({})
    failed = TransactionAbortableError("a message of the transaction failed: UnknownTopicError: no topic x")

    async def steps() -> None:
        await owner.init_transactions()
        await owner.begin_transaction()
        await owner.add_partitions([("t", 0)])
        with pytest.raises(TransactionAbortableError, match="no topic x"):
            await owner.commit_transaction(failed)
        assert owner.state() == "abortable_error"
        with pytest.raises(TransactionAbortableError, match="must be aborted: .*no topic x"):
            await owner.add_partitions([("t", 1)])  # a Flusher's batch for the doomed transaction
        with pytest.raises(TransactionAbortableError):
            await owner.commit_transaction(None)
        await owner.abort_transaction()
        await owner.begin_transaction()  # the next transaction starts clean

    asyncio.run(steps())
    assert [n for n, _ in cluster.conn.requests] == ["InitProducerId", "AddPartitionsToTxn", "EndTxn"]
    assert cluster.conn.requests[-1][1]["committed"] is False
    assert owner.state() == "in_transaction"


def test_a_fenced_message_makes_the_owner_fatal_for_good() -> None:
    owner, cluster = owner_over({})
    fenced = ProducerFencedError("produce to t/0: PRODUCER_FENCED", CODE["PRODUCER_FENCED"])

    async def steps() -> None:
        await owner.init_transactions()
        await owner.begin_transaction()
        await owner.add_partitions([("t", 0)])
        for call in (lambda: owner.commit_transaction(fenced), owner.abort_transaction, owner.begin_transaction,
                     lambda: owner.add_partitions([("t", 1)])):
            with pytest.raises(ProducerFencedError, match="produce to t/0"):
                await call()

    asyncio.run(steps())
    assert [n for n, _ in cluster.conn.requests] == ["InitProducerId", "AddPartitionsToTxn"]


def test_the_owner_asks_for_the_configured_transaction_timeout() -> None:
    owner, cluster = owner_over({}, **{"transaction.timeout.ms": 9000})
    assert asyncio.run(owner.init_transactions()) == (1000, 4)
    (name, body), = cluster.conn.requests
    assert (name, body["transactional_id"], body["transaction_timeout_ms"]) == ("InitProducerId", "txn-1", 9000)
