"""`ReportSources` (driver/producer_reports.py), with Ray's calls scripted: the driver learns the
broker workers from the RetryHandler's answers, keeps one poll in flight to each mailbox, drops
a worker once it answered closed or its poll failed, and never polls a dropped one again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raykafka.actors.producer_results import Outcome, Reports, WorkerList
from raykafka.driver.producer_reports import RETRY_HANDLER, ReportSources


class Ref:
    def __init__(self, answer):
        self.answer = answer


class Mailboxes:
    """Scripted answers per source: each poll takes the next one (an empty Reports when none is left)."""

    def __init__(self):
        self.script: dict[str, list] = {}
        self.polls: list[str] = []

    def handle(self, name: str, group: bool = False):
        def poll(*args):
            self.polls.append(name)
            queue = self.script.get(name, [])
            return Ref(queue.pop(0) if queue else Reports([], []))

        remote = SimpleNamespace(remote=poll)
        method = SimpleNamespace(remote=poll, options=lambda **kw: remote) if group else remote
        return SimpleNamespace(poll=method)


@pytest.fixture
def scripted(monkeypatch):
    import ray

    def get(ref):
        if isinstance(ref.answer, BaseException):
            raise ref.answer
        return ref.answer

    monkeypatch.setattr(ray, "wait", lambda refs, num_returns=1, timeout=None: (list(refs), []))
    monkeypatch.setattr(ray, "get", get)
    return Mailboxes()


def test_workers_are_learned_from_the_retry_handler_and_dropped_once_closed_or_failed(scripted):
    a, b = scripted.handle("w-a"), scripted.handle("w-b")
    sources = ReportSources(scripted.handle(RETRY_HANDLER, group=True), "p")
    done = Outcome([1], "t", 0, 5)
    scripted.script[RETRY_HANDLER] = [Reports([], [], workers=WorkerList(1, [("w-a", a), ("w-b", b)]))]
    first = sources.round(0.2)
    assert scripted.polls == [RETRY_HANDLER] and sources.workers_seen == 1 and list(sources.workers) == ["w-a", "w-b"]
    assert first.failed == []
    scripted.script["w-a"] = [Reports([done], [], closed=True)]  # hands over what it held, then exits
    scripted.script["w-b"] = [RuntimeError("killed")]
    second = sources.round(0.2)
    assert [r.outcomes for r in second.reports if r.outcomes] == [[done]]
    assert [(name, str(exc)) for name, exc in second.failed] == [("w-b", "killed")]
    assert sources.workers == {} and sources.gone == {"w-a", "w-b"}
    # a stale list naming them again does not bring them back
    scripted.script[RETRY_HANDLER] = [Reports([], [], workers=WorkerList(2, [("w-a", a), ("w-b", b)]))]
    scripted.polls.clear()
    sources.round(0.2)
    sources.round(0.2)
    assert set(scripted.polls) == {RETRY_HANDLER}


def test_the_last_poll_asks_the_retry_handler_first_then_every_worker_it_names(scripted):
    c = scripted.handle("w-c")
    sources = ReportSources(scripted.handle(RETRY_HANDLER, group=True), "p")
    late = Outcome([2], "t", 1, 9)
    scripted.script[RETRY_HANDLER] = [Reports([], [], workers=WorkerList(3, [("w-c", c)]))]
    scripted.script["w-c"] = [Reports([late], [])]
    last = sources.last(1.0)
    assert scripted.polls == [RETRY_HANDLER, "w-c"]
    assert [o for r in last.reports for o in r.outcomes] == [late] and last.failed == []
    assert sources.in_flight == {}
