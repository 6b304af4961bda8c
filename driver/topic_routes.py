"""`TopicRoutes`: where the producer's sender thread hands each topic's batches.

A topic's first batches go to the TopicDispatcher, which looks the topic up and adds it to the
PartitionDispatcher. The sender then asks it for the topic's route (`TopicDispatcher.route`) and
from the answer on hands the topic's batches straight to the PartitionDispatcher, every routed
topic's in one call: one actor hop fewer for every later message, which is about 1.5 ms of
latency and one process's work on a small node.

The switch keeps each topic's order. The TopicDispatcher answers only once the batches it
forwarded to the PartitionDispatcher have been taken there (it drains its calls first), and
the topic's batches wait here while the question is open, then go first, in order. A topic the
TopicDispatcher cannot route (unknown, or it failed) stays with it, which fails each batch with
the cause as before.

A call that fails (its dispatcher died) fails the batches it carried, with the cause
(`calls.pipeline_error`), and only those: `send` returns them for the sender to fail. A failed
call wakes the sender (`on_answer`), so its batches fail at once even when nothing else is sent;
`drain` collects the last ones at close.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..actors.batch import MessageBatch
from ..actors.calls import CallWindow, pipeline_error
from ..wire.errors import ProducerClosedError

Failed = tuple[list[MessageBatch], Exception]  # batches that could not be handed on, and why


class TopicRoutes:
    def __init__(self, topic_dispatcher: Any, window: int, on_answer: Callable[[], None]):
        self.topic_dispatcher = topic_dispatcher
        self.window = window
        self.to_topic_dispatcher = self._new_window()
        self.partition_dispatcher: Any = None  # known from the first route answered
        self.to_partition_dispatcher = self._new_window()
        self.direct: set[str] = set()  # topics routed to the PartitionDispatcher
        self.held: dict[str, list[MessageBatch]] = {}  # topics asked about -> their batches until the answer
        self.undirected: set[str] = set()  # topics that stay with the TopicDispatcher
        self._failed: list[Failed] = []  # sender thread only
        self._answers: list[tuple[str, Any]] = []  # (topic, handle or exception), from Ray's callback thread
        self._call_failed = False  # a call failed since the windows were last looked at (callback thread)
        self._lock = threading.Lock()
        self._on_answer = on_answer  # wakes the sender thread

    def has_answers(self) -> bool:
        """Whether a route came in or a call failed since the last `send`."""
        with self._lock:
            return bool(self._answers) or self._call_failed

    def send(self, batches: list[MessageBatch]) -> list[Failed]:
        """Hand `batches` on (sender thread only), after releasing any topic whose route came in.

        Returns the batches that could not be handed on, each with why, for the caller to fail:
        those of calls that failed since last time, a topic's held batches, new ones."""
        direct: list[MessageBatch] = []  # to the PartitionDispatcher, in one call
        for topic, answer, held in self._take_answers():
            if isinstance(answer, Exception):
                self.undirected.add(topic)
                self._submit(self.to_topic_dispatcher, self.topic_dispatcher, held)
            else:
                self.partition_dispatcher = answer
                self.direct.add(topic)
                direct.extend(held)  # before the topic's new batches
        via_topic_dispatcher: list[MessageBatch] = []
        to_ask: list[str] = []
        for batch in batches:
            if batch.topic in self.direct:
                direct.append(batch)
            elif batch.topic in self.held:
                self.held[batch.topic].append(batch)
            else:
                via_topic_dispatcher.append(batch)
                if batch.topic not in self.undirected and batch.topic not in to_ask:
                    to_ask.append(batch.topic)
        self._submit(self.to_partition_dispatcher, self.partition_dispatcher, direct)
        self._submit(self.to_topic_dispatcher, self.topic_dispatcher, via_topic_dispatcher)
        for topic in to_ask:  # asked after its batches above: the TopicDispatcher takes them first
            try:
                ref = self.topic_dispatcher.route.remote(topic)
            except Exception:  # cannot even ask: the topic stays with the TopicDispatcher
                self.undirected.add(topic)
                continue
            self.held[topic] = []
            ref.future().add_done_callback(lambda future, topic=topic: self._answered(topic, future))
        return self._take_failed()

    def drain(self, timeout: float) -> list[Failed]:
        """Wait up to `timeout` s for every call in flight (the sender has stopped); the batches
        of those that failed, and of topics whose route never came, each with why."""
        deadline = time.monotonic() + timeout
        for window in (self.to_topic_dispatcher, self.to_partition_dispatcher):
            window.drain(max(0.0, deadline - time.monotonic()))
        for topic, held in self.held.items():
            if held:
                self._failed.append((held, ProducerClosedError(
                    f"producer closed while the route to topic {topic!r} was asked for")))
        self.held = {}
        return self._take_failed()

    # -- utilities -------------------------------------------------------------------

    def _new_window(self) -> CallWindow:
        return CallWindow(self.window, lambda batches, exc: self._failed.append((batches, pipeline_error(exc))))

    def _submit(self, window: CallWindow, dispatcher: Any, batches: list[MessageBatch]) -> None:
        if not batches:
            return
        try:
            ref = dispatcher.dispatch.remote(batches)
        except Exception as exc:  # not even submitted: these end with the cause
            self._failed.append((batches, pipeline_error(exc)))
            return
        window.submit(ref, batches)  # an older call that failed goes to _failed with its own batches
        ref.future().add_done_callback(self._call_done)

    def _call_done(self, future: Any) -> None:
        """Ray's callback thread: a failed call wakes the sender, which fails its batches."""
        if future.exception() is None:
            return
        with self._lock:
            self._call_failed = True
        self._on_answer()

    def _take_failed(self) -> list[Failed]:
        with self._lock:
            look = self._call_failed
            self._call_failed = False
        if look:  # collect the failed calls now, not when the window next fills
            for window in (self.to_topic_dispatcher, self.to_partition_dispatcher):
                window.finished()
        failed, self._failed = self._failed, []
        return failed

    def _answered(self, topic: str, future: Any) -> None:
        try:
            answer = future.result()
        except Exception as exc:
            answer = exc
        with self._lock:
            self._answers.append((topic, answer))
        self._on_answer()

    def _take_answers(self) -> list[tuple[str, Any, list[MessageBatch]]]:
        """The routes answered since last time, each with the topic's batches held meanwhile."""
        with self._lock:
            answers, self._answers = self._answers, []
        return [(topic, answer, self.held.pop(topic)) for topic, answer in answers]
