"""`CallWindow`: at most N calls in flight from one stage to the next (backpressure).

Ray's actor queues are unbounded; a stage that submits a call per batch would let a fast
producer pile up work downstream without limit. `submit` blocks the caller on the oldest call
once N are outstanding, which also surfaces a downstream failure at the caller. A stage that
must not wait (the LeaderDispatcher, whose partitions lead on different brokers) asks
`has_room` and `add`s, and keeps what does not fit itself.

Each call carries what it handed on (`carried`, e.g. its batches), so that a call found failed
is reported with its own batches, not with whatever the caller happens to be submitting when it
notices. A window built with `on_failed` hands each failed call to it, `on_failed(carried,
error)`, and goes on; a window without it raises the error, as Ray's `get` does. Calls are
looked at in the order they were submitted.

`when_returned` calls back once a call has returned, so that a stage that keeps what a full
window would not take is woken when room is made, without waiting in the meantime.

`pipeline_error` turns what Ray raises for a failed call into a `PipelineError` naming the actor
that died and why (a `KafkaError` passes through as it is).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import ray
from ray.exceptions import RayActorError

from ..wire.errors import KafkaError, PipelineError


class _Call(NamedTuple):
    ref: Any  # the call's ObjectRef
    carried: Any  # what it handed on, given back with its error


class CallWindow:
    def __init__(self, limit: int, on_failed: Callable[[Any, BaseException], None] | None = None):
        self.limit = limit
        self.on_failed = on_failed
        self._calls: deque[_Call] = deque()

    def __len__(self) -> int:
        return len(self._calls)

    def has_room(self) -> bool:
        """Whether a call can go without waiting: fewer than N are outstanding, once those that
        have returned are taken out (a failed one to `on_failed`; looked at only when N are out,
        as `submit` does)."""
        if len(self._calls) < self.limit:
            return True
        self.finished()
        return len(self._calls) < self.limit

    def add(self, ref: Any, carried: Any = None) -> None:
        """Add a call without waiting, past N if need be: for a caller that asked `has_room`, or
        one that must send now (a partition leaving its broker sends what it kept for it)."""
        self._calls.append(_Call(ref, carried))

    def oldest(self) -> Any:
        """The oldest outstanding call's ObjectRef, or None."""
        return self._calls[0].ref if self._calls else None

    def submit(self, ref: Any, carried: Any = None) -> list[Any]:
        """Add a call; the results of the oldest ones, once more than N are outstanding (waited
        for). The call just added stays in the window whatever an older one did."""
        self._calls.append(_Call(ref, carried))
        out = []
        while len(self._calls) > self.limit:
            self._take(self._calls.popleft(), out)
        return out

    def finished(self) -> list[Any]:
        """The results of the oldest calls that have returned already, without waiting. A failed
        call goes to `on_failed`; without it, it stays in the window for `submit` or `drain` to
        raise."""
        out: list[Any] = []
        while self._calls and ray.wait([self._calls[0].ref], timeout=0)[0]:
            if self.on_failed is None:
                try:
                    out.append(ray.get(self._calls[0].ref))
                except Exception:
                    break
                self._calls.popleft()
            else:
                self._take(self._calls.popleft(), out)
        return out

    def drain(self, timeout: float | None = None) -> int:
        """Wait for every call (up to `timeout` s); the number still outstanding after it, which
        stay in the window. Without `on_failed`, the first failure is raised and the window emptied."""
        if self.on_failed is None:
            refs = [call.ref for call in self._calls]
            self._calls = deque()
            if refs:
                ray.get(refs, timeout=timeout)
            return 0
        if self._calls:
            ray.wait([call.ref for call in self._calls], num_returns=len(self._calls), timeout=timeout)
        out: list[Any] = []
        while self._calls and ray.wait([self._calls[0].ref], timeout=0)[0]:
            self._take(self._calls.popleft(), out)
        return len(self._calls)

    def _take(self, call: _Call, out: list[Any]) -> None:
        """The result of a finished (or finishing) call into `out`; a failure to `on_failed`, or raised."""
        try:
            out.append(ray.get(call.ref))
        except Exception as exc:
            if self.on_failed is None:
                raise
            self.on_failed(call.carried, exc)


def when_returned(ref: Any, call: Callable[[], Any]) -> None:
    """`call()` once `ref` has returned or failed, in a thread of its own: Ray runs a done
    callback in its core worker's event thread, where no Ray call belongs (an actor passes its
    own method's `.remote`, so that what it does then runs in the actor's thread, in turn)."""
    ref.future().add_done_callback(lambda _done: threading.Thread(target=call, daemon=True).start())


def pipeline_error(exc: BaseException) -> KafkaError:
    """Why a call to a producer actor failed, as a `KafkaError`: the `KafkaError` it raised, or a
    `PipelineError` naming the actor that died (and Ray's cause) or the method that raised."""
    if isinstance(exc, KafkaError):
        return exc
    cause = getattr(exc, "cause", None)  # a RayTaskError wraps what the actor's method raised
    if isinstance(cause, KafkaError):
        return cause
    inner = cause if isinstance(cause, BaseException) else exc
    # Ray's error text, read here and nowhere else: a dead actor's name is only in its error
    # message (tab-indented `name:` lines), and the method that raised only in the first line
    text = str(getattr(inner, "error_msg", None) or inner).strip()
    if _is_actor_death(inner):
        fields = dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line and line[:1] == "\t")
        name = fields.get("name", "").strip() or fields.get("class_name", "").strip() or "(unnamed)"
        return PipelineError(f"producer actor {name} died: {text.splitlines()[-1].strip()}")
    where = re.search(r"ray::([\w.]+)\(", str(exc).split("\n", 1)[0]) if inner is not exc else None
    first = text.splitlines()[0] if text else ""
    return PipelineError(f"producer pipeline failed{f' in {where[1]}' if where else ''}: {type(inner).__name__}: {first}")


def _is_actor_death(exc: BaseException) -> bool:
    return isinstance(exc, RayActorError)
