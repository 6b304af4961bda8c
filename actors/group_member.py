"""GroupMember: one per consumer-group member; runs the user's handler on its claims' batches.

Called by: the driver's `ConsumerGroup` (`start`, `status`, `stop`, `watch`, `ping`). Calls: its
`MemberRuntime` (`actors/group_member_state.py`), which holds the member's whole life without
Ray: sessions one per generation, heartbeats, the fetch loop over its claims, commits, and the
handler in a thread per claim, each seeing a `Session` of `Claim`s (`actors/group_session.py`).

A thin actor: it starts the runtime in its constructor and answers from it. Order kept is the
runtime's: per claim, batches reach the handler in offset order.
"""

from __future__ import annotations

from typing import Any

from .group_member_state import MAX_HANDLER_FAILURES, MemberRuntime


class GroupMember:
    """The Ray actor around `MemberRuntime`."""

    def __init__(self, config: dict[str, Any], topics: list[str], handler: Any,
                 max_handler_failures: int = MAX_HANDLER_FAILURES):
        self.runtime = MemberRuntime(config, topics, handler, max_handler_failures)
        self.runtime.start()

    def ping(self) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        return self.runtime.status()

    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        self.runtime.stop(timeout)
        return self.runtime.status()

    def watch(self) -> None:
        """Answers once the member has ended (stopped, or a fatal error): the driver holds this
        call open to learn, by its failure instead, that the actor died."""
        self.runtime.wait_ended()
