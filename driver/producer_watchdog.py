"""`ProducerWatchdog`: one per `Producer`, a driver-side thread that bounds every message's life.

Started by the `Producer` (`ProducerWatchdog.watch(producer)`); reads the producer's unresolved
messages through its public watch interface (`watch_mark`, `unresolved_before`, `expire`,
`stopping`, `ray_gone`) and the GCS actor table; calls nothing in the pipeline. It keeps no
order: it only settles messages the pipeline has not settled in time.

Why: pipeline actors are never restarted by Ray. A producer without `transactional.id` heals:
a death seen here asks it to rebuild its pipeline (`request_heal`), and `healed()` then turns
the watch to the new one (`pipeline_prefix`). A transactional producer does not heal, and a
message inside an actor that dies (killed, out of memory, a crash) would otherwise stay pending
until `close()`. The BrokerWorkers enforce
`delivery.timeout.ms` only on messages that reach them. So the driver enforces it too: a message
still unresolved `delivery.timeout.ms` + `request.timeout.ms` after `send` fails with
`OutcomeUnknownError` (a `DeliveryTimeoutError` that says the broker may have written it: nothing
answered for it, and it may be in a request on its way); when an actor of this producer has
died, the error names it (and its death cause). The `request.timeout.ms` of grace lets the
pipeline's own answer (an offset, or the BrokerWorker's timeout with its last error) win the race,
and a healed pipeline's answer for what the heal sent again; only a transactional producer
with a dead actor, which does not heal, gets no grace.

Ages come from checkpoints of the producer's message id counter (ids only grow), so no
per-message timestamp is kept: a message sent before a checkpoint taken at time T is at least
`now - T` old.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from ..wire.errors import OutcomeUnknownError
from .ray_runtime import actor_table, starts_no_ray

log = logging.getLogger("raykafka.producer.watchdog")

TICK = 0.2  # seconds between checks
ACTOR_SCAN = 1.0  # seconds between looks at the actor table


class ProducerWatchdog:
    def __init__(self, producer: Any):
        self.producer = producer
        config = producer.config
        self.delivery_timeout = config["delivery.timeout.ms"] / 1000
        self.grace = config["request.timeout.ms"] / 1000
        self.marks: deque[tuple[float, int]] = deque()  # (monotonic time, next id then)
        self.dead: dict[str, str] = {}  # actor name -> death cause, for this producer's actors
        self.expired = 0
        self._last_scan = 0.0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=starts_no_ray(self._run), name=f"{producer.name}-watchdog", daemon=True)

    @classmethod
    def watch(cls, producer: Any) -> ProducerWatchdog:
        dog = cls(producer)
        dog.thread.start()
        return dog

    def stop(self) -> None:
        self._stop.set()

    def scan_now(self) -> None:
        """Look at the actor table now (close asks before it shuts the pipeline down)."""
        try:
            self._scan_actors()
        except Exception:  # only a better error message is at stake
            log.exception("%s: actor scan failed", self.producer.name)

    def healed(self) -> None:
        """The producer rebuilt its pipeline: the deaths seen belong to the old one."""
        self.dead = {}

    def dead_names(self, role: str) -> list[str]:
        """The actors of `role` (e.g. "broker_worker") of the pipeline in use seen dead, by name."""
        prefix = self.producer.pipeline_prefix + role
        return [name for name in list(self.dead) if name.startswith(prefix)]

    def dead_actors(self) -> str:
        """The actors of this producer seen dead, with Ray's causes, as an error text; '' if none."""
        dead = dict(self.dead)
        if not dead:
            return ""
        named = ", ".join(f"{n} ({c or 'unknown cause'})" for n, c in sorted(dead.items()))
        return f"ActorDiedError: producer actor(s) died: {named}"

    # -- the loop ------------------------------------------------------------------

    def _run(self) -> None:
        p = self.producer
        while not self._stop.wait(TICK):
            if p.ray_session.gone():  # shut down under the producer: nothing left to watch
                p.ray_gone()
                return
            try:
                mark = p.watch_mark()
                if mark is None:
                    return
                self.marks.append((time.monotonic(), mark))
                now = time.monotonic()
                if now - self._last_scan >= ACTOR_SCAN:
                    self._last_scan = now
                    self._scan_actors()
                    if self.dead:
                        p.request_heal(self.dead_actors())
                self._expire(now)
            except Exception:  # never let the safety net die silently
                log.exception("%s: watchdog check failed", p.name)

    def _scan_actors(self) -> None:
        """Note this producer's actors that died unexpectedly, with their death cause.

        A BrokerWorker exits by itself (`exit_actor`) only at the producer's close; a scan that
        overlaps the close sees that exit as intended. Any other death (a BrokerWorker killed or crashed,
        or any other role) is one the pipeline did not ask for."""
        if self.producer.stopping:
            return  # close() shuts them down on purpose
        prefix = self.producer.pipeline_prefix
        mine = [a for a in actor_table().values() if (a.get("Name") or "").startswith(prefix)]
        for a in mine:
            name = a["Name"]
            if a.get("State") != "DEAD" or name in self.dead:
                continue
            text = str(a.get("DeathCause") or "")
            role = name[len(prefix):]
            if role.startswith("broker_worker") and _intended(text):
                continue
            if prefix != self.producer.pipeline_prefix:  # healed meanwhile: these were the old pipeline's
                return
            self.dead[name] = _death_reason(text)
            log.error("%s: actor %s died (%s)", self.producer.name, name, self.dead[name] or "unknown cause")

    def _expire(self, now: float) -> None:
        """Fail every message sent before the deadline that is still unresolved."""
        # the grace lets a living pipeline's answer win, or a healed one's: a heal sends again
        # what the log does not hold, and that request must be allowed to finish
        bound = self.delivery_timeout + (self.grace if self.producer.heals_on_death or not self.dead else 0)
        cutoff = -1
        while self.marks and self.marks[0][0] <= now - bound:
            cutoff = self.marks.popleft()[1]
        if cutoff < 0:
            return
        p = self.producer
        entries = p.unresolved_before(cutoff)
        if not entries:
            return
        if not self.dead:  # look once more, so the error names a death if there was one
            self._scan_actors()
        error = OutcomeUnknownError(self._message(bound))
        self.expired += sum(len(ids) for ids in entries)
        log.error("%s: %d message(s) expired: %s", p.name, sum(len(ids) for ids in entries), error)
        p.expire(entries, error)

    def _message(self, bound: float) -> str:
        text = (f"no answer within {bound:g}s (delivery.timeout.ms={int(self.delivery_timeout * 1000)}); "
                "outcome unknown: it was handed to the pipeline and may have been written")
        dead = self.dead_actors()
        return f"{text}: {dead}" if dead else f"{text}; every producer actor is alive"


def _intended(text: str) -> bool:
    return "INTENDED_USER_EXIT" in text or "exit_actor()" in text


def _death_reason(text: str) -> str:
    """Why Ray says the actor died: the `reason:` of its death-cause record, or its error message."""
    if "ray.kill" in text:
        return "killed by ray.kill"
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("reason:"):
            return line.split(":", 1)[1].strip()
        if line.startswith("error_message:"):
            return line.split(":", 1)[1].strip().strip('"')[:200]
    return ""
