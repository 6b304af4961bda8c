"""The mock cluster's fault controls: scripted answers, injected error codes, dropped
connections, delayed answers, moved leaders, stopped brokers. Every fault actually injected is
counted in `MockCluster.faults` (kind -> count), for chaos reports to quote.

`FaultControls` is one of `MockCluster`'s bases: it works on the cluster's `lock`, `brokers`,
`handlers`, `faults` and its rule lists (`_fail_rules`, `_drop_rules`, `_delays`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.errors import code_for
from ..wire.protocol import Api
from .broker import Handler
from .protocol_codes import api_name, key_of


@dataclass
class FailRule:
    api_key: int
    error_code: int
    remaining: int
    node_id: int | None
    topic: str | None
    partition: int | None

    def matches(self, api_key: int, node_id: int, topic: str | None, partition: int | None) -> bool:
        return (self.api_key == api_key and self.node_id in (None, node_id)
                and self.topic in (None, topic) and self.partition in (None, partition))


@dataclass
class DropRule:
    api_key: int
    remaining: int
    node_id: int | None
    apply: bool


class FaultControls:
    """Fault controls, thread-safe and callable from the test's thread; and how the brokers take
    the faults scheduled for the request at hand."""

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        """Make `node_id` the partition's leader (the leader epoch goes up, the log stays)."""
        if node_id not in self.brokers:
            raise ValueError(f"no broker {node_id}")
        with self.lock:
            p = self._partition_or_raise(topic, partition)
            p.leader = node_id
            p.leader_epoch += 1
            self.faults["leader_move"] += 1
        self._notify_change()

    def fail_next(self, api_key: Api | int, error_code: int, count: int = 1, *, node_id: int | None = None,
                  topic: str | None = None, partition: int | None = None) -> None:
        """The next `count` matching answers carry `error_code` instead of being processed.

        Partition-level for Produce, Fetch, ListOffsets, OffsetCommit and OffsetFetch; topic-level
        for Metadata and CreateTopics; the whole answer's error code for every other API.
        """
        with self.lock:
            self._fail_rules.append(FailRule(key_of(api_key), error_code, count, node_id, topic, partition))

    def drop_after_request(self, api_key: Api | int, count: int = 1, node_id: int | None = None, *,
                           apply: bool = False) -> None:
        """Close the connection right after reading the next `count` such requests, unanswered.

        With `apply=True` the request is processed first (a Produce is appended), so the client
        cannot tell whether it was: the case a retry with idempotence exists for.
        """
        with self.lock:
            self._drop_rules.append(DropRule(key_of(api_key), count, node_id, apply))

    def set_handler(self, api_key: Api | int, fn: Handler | None, node_id: int | None = None) -> None:
        """Script the answers to one kind of request; fn(version, body, broker) returns the
        response dict (or None for no answer, or an awaitable of either). None: back to the default.

        A script can wrap the default: `broker.cluster.default_handlers[key](version, body, broker)`.
        """
        if node_id is not None:
            self.brokers[node_id].set_handler(api_key, fn)
            return
        with self.lock:
            if fn is None:
                self.handlers.pop(key_of(api_key), None)
            else:
                self.handlers[key_of(api_key)] = fn

    def delay(self, api_key: Api | int, seconds: float, node_id: int | None = None) -> None:
        """Hold every answer of this kind `seconds` after processing it (0 removes the delay)."""
        with self.lock:
            if seconds > 0:
                self._delays[(key_of(api_key), node_id)] = seconds
            else:
                self._delays.pop((key_of(api_key), node_id), None)

    def stop_broker(self, node_id: int) -> None:
        """Close the broker's listener and its connections (leadership does not move by itself)."""
        self.brokers[node_id].stop()
        with self.lock:
            self.faults["broker_stop"] += 1

    def start_broker(self, node_id: int) -> None:
        """Listen again on the same port."""
        self.brokers[node_id].start()

    def _take_fault(self, api_key: int, node_id: int, topic: str | None = None,
                    partition: int | None = None) -> int:
        """The injected error for this answer, or 0; counts it in `faults`."""
        with self.lock:
            for rule in self._fail_rules:
                if rule.matches(api_key, node_id, topic, partition):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._fail_rules.remove(rule)
                    self.faults[f"error/{api_name(api_key)}/{code_for(rule.error_code).name}"] += 1
                    return rule.error_code
        return 0

    def _take_drop(self, api_key: int, node_id: int) -> DropRule | None:
        with self.lock:
            for rule in self._drop_rules:
                if rule.api_key == api_key and rule.node_id in (None, node_id):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._drop_rules.remove(rule)
                    self.faults[f"drop/{api_name(api_key)}" + ("/applied" if rule.apply else "")] += 1
                    return rule
        return None

    def _delay_for(self, api_key: int, node_id: int) -> float:
        with self.lock:
            seconds = self._delays.get((api_key, node_id)) or self._delays.get((api_key, None)) or 0.0
            if seconds:
                self.faults[f"delay/{api_name(api_key)}"] += 1
            return seconds
