"""The RetryHandler's queue alone: batches wait out the backoff, come out in order, and a close
wakes the forwarding thread."""

from __future__ import annotations

import threading
import time

from raykafka.actors.retry_queue import RetryQueue


def test_batches_wait_out_the_backoff_and_keep_their_order():
    queue = RetryQueue(0.05)
    start = time.monotonic()
    queue.put(["a1", "a2"])
    queue.put(["b"])
    taken = []
    while len(taken) < 3:
        batch = queue.take()
        assert batch is not None
        taken.extend(batch)
    assert taken == ["a1", "a2", "b"]
    assert time.monotonic() - start >= 0.05


def test_close_wakes_a_waiting_take_and_counts_what_was_dropped():
    queue = RetryQueue(60.0)
    queue.put(["late"])
    answers = []
    taker = threading.Thread(target=lambda: answers.append(queue.take()))
    taker.start()
    assert queue.close() == 1
    taker.join(5)
    assert not taker.is_alive() and answers == [None]
    assert queue.take() is None
