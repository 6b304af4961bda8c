"""`ReportSources`: the mailboxes one producer pipeline's outcomes come from, as the driver
long-polls them: the RetryHandler's (what the stages before the brokers decided) and each
BrokerWorker's (what its brokers answered), with one poll in flight to each.

One per `ProducerPipeline`, used by the Producer's results thread (`round`) and, once that
thread has let go or paused, by a heal or close (`last`); its one lock makes their turns whole.
It learns which workers exist from the RetryHandler's answers (`Reports.workers`), and drops a
worker once it answered that its mailbox is closed (it exits) or once a poll of it failed. A
failed poll is handed back (`Polled.failed`) for the Producer to judge: a worker that exited on
purpose without being polled empty (`intended_exit`) is no death; any other failure is.

Calls the actors' `poll` only; no order is kept across sources, none is needed (every outcome
names the message ids it settles).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NamedTuple

import ray

from ..actors.options import POLL_GROUP
from ..actors.producer_results import Reports, WorkerList

log = logging.getLogger("raykafka.producer")

# how long (s) a source's answer may be late, past its poll's own timeout, before `round` returns empty
POLL_MARGIN = 1.0
RETRY_HANDLER = ""  # the RetryHandler's name among the sources


class Polled(NamedTuple):
    """What a round of polls brought: the answers, and the sources whose poll failed (name, error)."""

    reports: list[Reports]
    failed: list[tuple[str, BaseException]]


class ReportSources:
    def __init__(self, retry_handler: Any, name: str):
        """`name`: the pipeline's, for the logs."""
        self.retry_handler = retry_handler
        self.name = name
        self.workers: dict[str, Any] = {}  # name -> handle: the workers to poll
        self.gone: set[str] = set()  # sources closed or failed: never polled again
        self.workers_seen = -1  # the version of the RetryHandler's worker list known here
        self.in_flight: dict[Any, str] = {}  # poll ref -> its source's name
        self.lock = threading.Lock()

    def round(self, timeout: float) -> Polled:
        """A poll in flight to every source that has none, then the answers of those that came
        within `timeout` s (+ POLL_MARGIN), at least one unless none did."""
        with self.lock:
            self._poll_all(timeout)
            if not self.in_flight:
                return Polled([], [])
            refs = list(self.in_flight)
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout + POLL_MARGIN)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            return self._collect(ready)

    def settle(self, timeout: float) -> Polled:
        """The answers of the polls in flight, waiting up to `timeout` s; no new poll. Those that
        do not come in time are dropped (their outcomes, if any, are lost)."""
        with self.lock:
            refs = list(self.in_flight)
            ready = ray.wait(refs, num_returns=len(refs), timeout=timeout)[0] if refs else []
            polled = self._collect(ready)
            for ref in set(self.in_flight) - set(ready):
                log.warning("%s: a poll of %s did not answer", self.name, self.in_flight.pop(ref) or "the retry handler")
            return polled

    def last(self, timeout: float) -> Polled:
        """Everything the sources still hold, without waiting for news: the polls in flight,
        then the RetryHandler (which names the workers), then every worker; `timeout` s for each step."""
        polled = self.settle(timeout)
        with self.lock:
            for step in ([RETRY_HANDLER], None):
                names = step if step is not None else list(self.workers)
                refs = [self._poll(name, 0) for name in names if name not in self.gone]
                if refs:
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
                    more = self._collect(ready)
                    polled.reports.extend(more.reports)
                    polled.failed.extend(more.failed)
                    for ref in set(refs) - set(ready):
                        log.warning("%s: the last poll of %s did not answer", self.name, self.in_flight.pop(ref))
        return polled

    # -- utilities -----------------------------------------------------------------

    def _poll_all(self, timeout: float) -> None:
        polled = set(self.in_flight.values())
        for name in [RETRY_HANDLER, *self.workers]:
            if name not in polled and name not in self.gone:
                self._poll(name, timeout)

    def _poll(self, name: str, timeout: float) -> Any:
        if name == RETRY_HANDLER:
            ref = self.retry_handler.poll.options(concurrency_group=POLL_GROUP).remote(timeout, self.workers_seen)
        else:
            ref = self.workers[name].poll.remote(timeout)
        self.in_flight[ref] = name
        return ref

    def _collect(self, refs: list[Any]) -> Polled:
        polled = Polled([], [])
        for ref in refs:
            name = self.in_flight.pop(ref)
            try:
                reports = ray.get(ref)
            except Exception as exc:
                self._drop(name)
                polled.failed.append((name, exc))
                continue
            if reports.workers is not None:
                self._learn(reports.workers)
            if reports.closed:
                self._drop(name)
            polled.reports.append(reports)
        return polled

    def _learn(self, listed: WorkerList) -> None:
        self.workers_seen = listed.version
        for name, handle in listed.workers:
            if name not in self.gone:
                self.workers.setdefault(name, handle)

    def _drop(self, name: str) -> None:
        self.gone.add(name)
        self.workers.pop(name, None)


def intended_exit(error: BaseException) -> bool:
    """Whether a failed call's actor exited on purpose (`exit_actor`), not died."""
    text = str(error)
    return "INTENDED_USER_EXIT" in text or "exit_actor()" in text
