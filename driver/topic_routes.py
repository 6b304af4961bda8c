"""`TopicRoutes`: where the producer's sender thread hands each topic's batches.

A topic's first batches go to the TopicDispatcher, which starts the topic's PartitionDispatcher.
The sender then asks it for that dispatcher (`TopicDispatcher.route`) and from the answer on
hands the topic's batches straight to it: one actor hop fewer for every later message, which is
about 1.5 ms of latency and one process's work on a small node.

The switch keeps each topic's order. The TopicDispatcher answers only once the batches it
forwarded to the PartitionDispatcher have been taken there (it drains its calls first), and
the topic's batches wait here while the question is open, then go first, in order. A topic the
TopicDispatcher cannot route (unknown, or it failed) stays with it, which fails each batch with
the cause as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..actors.batch import MessageBatch
from ..actors.calls import CallWindow


class TopicRoutes:
    def __init__(self, topic_dispatcher: Any, window: int, on_answer: Callable[[], None]):
        self.topic_dispatcher = topic_dispatcher
        self.window = window
        self.to_topic_dispatcher = CallWindow(window)
        self.direct: dict[str, tuple[Any, CallWindow]] = {}  # topic -> (PartitionDispatcher, its calls)
        self.held: dict[str, list[MessageBatch]] = {}  # topics asked about -> their batches until the answer
        self.undirected: set[str] = set()  # topics that stay with the TopicDispatcher
        self._answers: list[tuple[str, Any]] = []  # (topic, handle or exception), from Ray's callback thread
        self._lock = threading.Lock()
        self._on_answer = on_answer  # wakes the sender thread

    def has_answers(self) -> bool:
        with self._lock:
            return bool(self._answers)

    def send(self, batches: list[MessageBatch]) -> list[tuple[list[MessageBatch], Exception]]:
        """Hand `batches` on (sender thread only), after releasing any topic whose route came in.

        Returns the batches that could not be handed on, each with why, for the caller to fail:
        a topic's held batches as well as the new ones."""
        failed: list[tuple[list[MessageBatch], Exception]] = []
        for topic, answer, held in self._take_answers():
            if isinstance(answer, Exception):
                self.undirected.add(topic)
                self._submit(self.to_topic_dispatcher, self.topic_dispatcher, held, failed)
            else:
                route = self.direct[topic] = (answer, CallWindow(self.window))
                self._submit(route[1], answer, held, failed)
        via_topic_dispatcher: list[MessageBatch] = []
        to_ask: list[str] = []
        for batch in batches:
            route = self.direct.get(batch.topic)
            if route is not None:
                self._submit(route[1], route[0], [batch], failed)
            elif batch.topic in self.held:
                self.held[batch.topic].append(batch)
            else:
                via_topic_dispatcher.append(batch)
                if batch.topic not in self.undirected and batch.topic not in to_ask:
                    to_ask.append(batch.topic)
        self._submit(self.to_topic_dispatcher, self.topic_dispatcher, via_topic_dispatcher, failed)
        for topic in to_ask:  # asked after its batches above: the TopicDispatcher takes them first
            try:
                ref = self.topic_dispatcher.route.remote(topic)
            except Exception:  # cannot even ask: the topic stays with the TopicDispatcher
                self.undirected.add(topic)
                continue
            self.held[topic] = []
            ref.future().add_done_callback(lambda future, topic=topic: self._answered(topic, future))
        return failed

    @staticmethod
    def _submit(window: CallWindow, dispatcher: Any, batches: list[MessageBatch],
                failed: list[tuple[list[MessageBatch], Exception]]) -> None:
        if not batches:
            return
        try:
            window.submit(dispatcher.dispatch.remote(batches))
        except Exception as exc:  # a dispatcher downstream failed: these end with its error
            failed.append((batches, exc))

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
