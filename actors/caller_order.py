"""The numbered calls from a LeaderDispatcher to a broker on a BrokerWorker, and their order
on arrival: Ray-free, both sides of one invariant.

The BrokerWorker is an async actor, and Ray does not promise that an async actor starts one
caller's calls in the order they were submitted. So a caller numbers its calls
(`BrokerWorkerCalls`, one per process and broker generation, from `calls_to`) and the worker takes
each caller's calls in that order (`CallerOrder`). Kept apart from actors/broker_worker.py so that
a LeaderDispatcher's process loads none of the worker's aggregator and flusher.
"""

from __future__ import annotations

import uuid
from typing import Any

from .batch import MessageBatch


class CallerOrder:
    """Each caller's calls in the order it numbered them, without Ray: `take` holds a call that
    came before its turn and hands back, in order, every call whose turn has come."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}  # caller -> the sequence number whose turn it is
        self.early: dict[str, dict[int, Any]] = {}  # caller -> calls that came before their turn

    def take(self, caller: str, seq: int, item: Any) -> list[Any]:
        waiting = self.early.setdefault(caller, {})
        waiting[seq] = item
        turn = self.next.get(caller, 0)
        ready = []
        while turn in waiting:
            ready.append(waiting.pop(turn))
            turn += 1
        self.next[caller] = turn
        if not waiting:
            del self.early[caller]
        return ready

    def waiting(self) -> int:
        """Calls held for an earlier one of their caller."""
        return sum(len(calls) for calls in self.early.values())


class BrokerWorkerCalls:
    """One process's calls to one broker on one BrokerWorker, numbered for `CallerOrder`; it
    stands in for the worker's handle where a LeaderDispatcher sends (`add.remote(batches)`).
    One per process and broker generation (`calls_to`), so that every partition of a
    LeaderDispatcher on that broker shares one sequence, as they shared one caller's order with
    a synchronous actor."""

    def __init__(self, handle: Any, generation: int):
        self.handle = handle
        self.generation = generation
        self.caller = uuid.uuid4().hex
        self.seq = 0
        self.add = _NumberedAdd(self)


class _NumberedAdd:
    def __init__(self, calls: BrokerWorkerCalls):
        self.calls = calls

    def remote(self, batches: list[MessageBatch]) -> Any:
        calls = self.calls
        ref = calls.handle.add.remote(calls.generation, calls.caller, calls.seq, batches)
        calls.seq += 1
        return ref


_CALLS: dict[tuple[Any, int], BrokerWorkerCalls] = {}  # (worker handle, generation) -> this process's calls


def calls_to(handle: Any, generation: int) -> BrokerWorkerCalls:
    """This process's numbered calls to broker `generation` on the worker `handle`."""
    calls = _CALLS.get((handle, generation))
    if calls is None:
        calls = _CALLS[(handle, generation)] = BrokerWorkerCalls(handle, generation)
    return calls
