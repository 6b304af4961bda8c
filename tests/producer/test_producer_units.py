"""Driver-side pieces of the producer, without Ray: futures, serializers, config."""

from __future__ import annotations

import threading
import time

import pytest

from raykafka.driver.message_futures import MessageFuture
from raykafka.wire.serde import get_serializer, serialize_many

from ..reference import measured


def test_message_futures_share_a_condition_but_wait_for_their_own_result():
    shared = threading.Condition()
    mine, other = MessageFuture(shared), MessageFuture(shared)
    threading.Timer(0.05, lambda: other.set_result(1)).start()  # wakes `mine`'s waiter too
    threading.Timer(0.3, lambda: mine.set_result(2)).start()
    start = time.monotonic()
    assert mine.result(5) == 2 and time.monotonic() - start >= 0.25
    late = MessageFuture(shared)
    with pytest.raises(TimeoutError):
        late.result(0.1)


def test_serializers_turn_values_into_bytes_and_refuse_what_they_cannot():
    assert get_serializer("json")({"a": 1}) == b'{"a":1}'
    assert get_serializer("str")("é") == "é".encode()
    assert get_serializer("bytes")("text") == b"text"
    assert get_serializer(lambda v: v * 2)(b"ab") == b"abab"
    with pytest.raises(TypeError, match="int"):
        get_serializer("bytes")(5)
    with pytest.raises(TypeError, match=r"values\[1\]"):
        serialize_many(get_serializer("bytes"), [b"a", 5], "values")
    values = [b"a", None]
    assert serialize_many(get_serializer("bytes"), values, "values") is values  # no per-record work
    with pytest.raises(ValueError, match="serializer"):
        get_serializer("yaml")


class _Method:
    def __init__(self, call, future=None):
        self.remote = call
        self.future = lambda: future


class _Dispatcher:
    """Stands in for a dispatcher actor handle: records what it is handed, or fails like a dead actor."""

    def __init__(self, dead: bool = False):
        from concurrent.futures import Future

        self.taken: list = []
        self.route_answer: Future = Future()
        self.dead = dead
        self.dispatch = _Method(self._dispatch)
        self.route = _Method(lambda topic: self)  # the "ref" whose future() is the answer

    def _dispatch(self, batches):
        from concurrent.futures import Future

        if self.dead:
            raise RuntimeError("the actor died")
        self.taken.append(batches)
        answered: Future = Future()
        answered.set_result(None)
        return _Method(None, answered)  # a call "ref" that has returned

    def future(self):
        return self.route_answer


def test_topic_routes_hold_a_topic_until_its_route_then_account_for_every_batch():
    """A topic's first batch goes to the TopicDispatcher and its route is asked for; batches
    meanwhile wait, in order. When the route comes and handing over fails, the held batches come
    back as failed with the cause (none is dropped); when no route can be given, they go to the
    TopicDispatcher."""
    from raykafka.actors.batch import MessageBatch
    from raykafka.driver.topic_routes import TopicRoutes

    topic_dispatcher, woken = _Dispatcher(), []
    routes = TopicRoutes(topic_dispatcher, 8, lambda: woken.append(1))
    first, second, third = (MessageBatch(topic="t", ids=[i]) for i in range(3))
    assert routes.send([first]) == []
    assert topic_dispatcher.taken == [[first]] and routes.held == {"t": []}
    assert routes.send([second]) == [] and routes.send([third]) == []
    assert routes.held == {"t": [second, third]}

    dead = _Dispatcher(dead=True)
    topic_dispatcher.route_answer.set_result(dead)
    assert woken and routes.has_answers()
    failed = routes.send([])
    assert [batches for batches, _ in failed] == [[second, third]]
    assert "the actor died" in str(failed[0][1])
    assert routes.partition_dispatcher is dead and routes.direct == {"t"} and routes.held == {}

    other = _Dispatcher()
    routes.topic_dispatcher = other
    unknown = MessageBatch(topic="nowhere", ids=[9])
    routes.send([unknown])
    other.route_answer.set_exception(RuntimeError("no such topic"))
    later = MessageBatch(topic="nowhere", ids=[10])
    assert routes.send([later]) == []
    assert other.taken == [[unknown], [later]] and "nowhere" in routes.undirected


def test_a_batch_that_compresses_worse_than_estimated_is_cut_into_pieces_that_fit():
    """The Flusher cuts a batch whose compressed record batch is over max.request.size (the
    AggregatorState's ratio estimate was too hopeful) into pieces that each fit, every record once
    and in order, with consecutive sequence numbers; it measures the ratio for the AggregatorState."""
    import random
    from types import SimpleNamespace

    from raykafka.actors.batch import MessageBatch
    from raykafka.actors.flusher import Flusher
    from raykafka.wire.columns import BinaryColumn
    from raykafka.wire.config import parse_config
    from raykafka.wire.record_decoding import decode_record_batches

    config = parse_config({"bootstrap.servers": "localhost:9092", "compression.type": "lz4", "max.request.size": 20_000})
    flusher = Flusher(SimpleNamespace(config=config, prefix="p/"), 1, "localhost", 9092)
    rng = random.Random(3)
    values = [rng.randbytes(500) for _ in range(100)]  # 50,000 bytes that do not compress
    column = BinaryColumn.from_list(values)
    batch = measured(MessageBatch(topic="t", partition=2, ids=range(1000, 1100), values=column, producer_id=9,
                         producer_epoch=0, base_sequence=40))
    pieces = flusher._encode(batch, column)
    assert len(pieces) == 3  # 50 KB in pieces of at most 18,000 bytes
    assert [i for piece, _ in pieces for i in piece.ids] == list(range(1000, 1100))
    assert [piece.base_sequence for piece, _ in pieces] == [40, 74, 108]
    got = []
    for piece, parts in pieces:
        assert sum(map(len, parts)) <= 20_000
        (decoded,) = decode_record_batches(b"".join(parts))
        assert decoded.base_sequence == piece.base_sequence and decoded.producer_id == 9
        got += [r.value for r in decoded.records]
    assert got == values
    assert 0.9 < flusher.ratios["t"] < 1.1  # measured on the whole batch: compressed bytes per record byte
    small = measured(MessageBatch(topic="t", partition=2, ids=range(5), values=[b"a" * 100] * 5))
    assert len(flusher._encode(small, small.values)) == 1
    retried = measured(MessageBatch(topic="t", partition=2, ids=range(100), values=column, retries=1))
    assert len(flusher._encode(retried, column)) == 1  # a retry goes as it went the first time


def test_a_call_window_gives_finished_results_and_keeps_a_failed_call_for_drain_to_raise(ray_session):
    """A window gives the answers of calls that have returned; a call that failed is not
    swallowed there: `drain` still raises it."""
    import ray

    from raykafka.actors.calls import CallWindow

    @ray.remote
    def answer(x):
        return x

    @ray.remote
    def fail():
        raise RuntimeError("stage bug")

    window = CallWindow(8)
    refs = [answer.remote({"t": 0.5}), answer.remote({"t": 0.25}), fail.remote(), answer.remote({})]
    for ref in refs:
        window.submit(ref)
    ray.wait(refs, num_returns=len(refs), timeout=30)
    assert window.finished() == [{"t": 0.5}, {"t": 0.25}]
    assert len(window) == 2  # the failed call and the one after it
    with pytest.raises(RuntimeError, match="stage bug"):
        window.drain()


def test_a_batch_not_found_past_the_last_acked_offset_is_looked_for_from_the_log_start(monkeypatch):
    """A broker that lost batches it had acknowledged (tansu killed on S3 storage) writes the next
    at lower offsets than it answered before: a batch answered DUPLICATE_SEQUENCE_NUMBER without an
    offset is then not past the last acked offset, and is looked for again from the log's start,
    rather than failed "not found in the log" while the log holds it."""
    import asyncio
    from types import SimpleNamespace

    from raykafka.actors import flusher as flusher_module
    from raykafka.actors.batch import MessageBatch
    from raykafka.actors.flusher import Flusher
    from raykafka.actors.flusher_state import ProduceAnswer
    from raykafka.wire.config import parse_config
    from raykafka.wire.errors import BY_NAME

    log = {1040: 1050, 1050: 1060}  # offset -> base sequence: sequence 1040's batch was lost, 1050 is at 1040
    asked: list[int] = []

    async def find(conn, config, topic, partition, start, *, producer_id, producer_epoch, base_sequence, max_bytes):
        asked.append(start)
        for offset in sorted(o for o in log if o >= start):
            if log[offset] == base_sequence:
                return offset
            if log[offset] > base_sequence:
                return None
        return None

    async def connected(conn) -> None:
        return None

    monkeypatch.setattr(flusher_module, "find_batch_offset", find)
    config = parse_config({"bootstrap.servers": "localhost:9092"})
    flusher = Flusher(SimpleNamespace(config=config, prefix="p/"), 1, "localhost", 9092)
    monkeypatch.setattr(flusher, "_connected", connected)
    acked = MessageBatch(topic="t", partition=2, ids=range(10), values=[b"v"] * 10, producer_id=1,
                         producer_epoch=0, base_sequence=1040)
    flusher.state.succeed_at(acked, 1040)  # acknowledged at 1040, then lost in the crash
    batch = MessageBatch(topic="t", partition=2, ids=range(10, 20), values=[b"v"] * 10, producer_id=1,
                         producer_epoch=0, base_sequence=1050)
    duplicate = ProduceAnswer(BY_NAME["DUPLICATE_SEQUENCE_NUMBER"].code, -1)
    located = asyncio.run(flusher._locate_written([batch], {("t", 2): duplicate}))
    assert located == {("t", 2): 1040}
    assert asked == [1050, 0]  # past the acked batch first, then from the log's start
    log[1040] = 1060  # not in the log at all: not found from either place, and the error says where it looked
    asked.clear()
    (error,) = asyncio.run(flusher._locate_written([batch], {("t", 2): duplicate})).values()
    assert "sequence 1050 not found in the log from offset 0" in str(error) and asked == [1050, 0]


def test_every_timer_a_stage_arms_calls_a_method_of_its_own():
    """A `SelfTimer("name")` calls `name` on its actor from a thread, where a misspelt name would
    only log an AttributeError, and the batches it should end would wait for the driver's bound."""
    import ast
    from pathlib import Path

    import raykafka.actors

    timers = {}
    for module in Path(raykafka.actors.__file__).parent.glob("*.py"):
        for cls in (n for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.ClassDef)):
            methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
            for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call)):
                if getattr(call.func, "id", None) == "SelfTimer":
                    name = call.args[0].value
                    timers[f"{module.stem}.{cls.name}.{name}"] = name in methods
    assert timers, "the stages arm SelfTimers"
    assert "leader_dispatcher.LeaderDispatcher.expire_waiting" in timers
    assert [timer for timer, found in timers.items() if not found] == []
