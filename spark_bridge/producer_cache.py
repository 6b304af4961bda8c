"""Pipelines kept between writes, one per config, as Spark's Kafka sink keeps its producers.

A producer pipeline is a handful of actor processes that take seconds to start and nothing
to keep (they hold no CPU), so a write given a config takes the cached pipeline for that
config, or starts one, and hands it back when done. A pipeline no write has used for
`idle_timeout` seconds (10 minutes, Spark's `spark.kafka.producer.cache.timeout`) is closed,
and so is every cached one when the process exits.

Two caches live in the driver: `PRODUCERS` holds `Producer`s (the driver-side path,
`writer.write_blocks`), `node_writers.POOLS` holds the per-node writer pools that Spark and
Ray Data writes go through. Both are `ProducerCache`s; what they open, test and close is given
to them (`Kept`).

    from raykafka.spark_bridge.producer_cache import PRODUCERS
    PRODUCERS.idle_timeout = 60     # close idle pipelines sooner
    PRODUCERS.close_all()           # or now
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ray

from ..driver.producer import Producer

log = logging.getLogger("raykafka.spark_bridge")

IDLE_TIMEOUT = 600.0

# Keys are keyed hashes, so no password of a config is held in one (nor can be guessed from
# one offline); the key is this process's own, as the cache is.
_KEY_SECRET = os.urandom(32)


class Kept(NamedTuple):
    """How a cache opens a pipeline for (config, variant), tells whether one still answers, closes one."""

    open: Callable[[Mapping[str, Any], Any], Any]
    alive: Callable[[Any], bool]
    close: Callable[[Any], None]


@dataclass
class _Entry:
    producer: Any
    users: int = 0
    idle_since: float = field(default_factory=time.monotonic)
    timer: threading.Timer | None = None  # closes it if still idle when it fires


class ProducerCache:
    """Open pipelines by config, each shared by the writes that run at once with that config."""

    def __init__(self, idle_timeout: float = IDLE_TIMEOUT, kept: Kept | None = None):
        self.idle_timeout = idle_timeout
        self.kept = kept or PRODUCER
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self.closed_idle = threading.Event()  # set each time an idle producer is closed

    @staticmethod
    def key(config: Mapping[str, Any], variant: Hashable = None) -> str:
        """The same for equal configs, different for configs that differ in any value (a password too)."""
        text = repr((sorted((str(k), repr(v)) for k, v in config.items()), variant))
        return hmac.new(_KEY_SECRET, text.encode(), hashlib.sha256).hexdigest()

    def acquire(self, config: Mapping[str, Any], variant: Hashable = None) -> Any:
        """The open pipeline for `config` (and `variant`, such as a pool's size), started if there
        is none (or the one there died)."""
        key = self.key(config, variant)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.users += 1
                if entry.timer is not None:
                    entry.timer.cancel()
                    entry.timer = None
        if entry is not None:
            if self.kept.alive(entry.producer):
                return entry.producer
            self.discard(entry.producer)
        producer = self.kept.open(config, variant)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:  # else another write started one meanwhile: one is enough
                self._entries[key] = _Entry(producer, users=1)
                return producer
            entry.users += 1
        self.kept.close(producer)
        return entry.producer

    def release(self, producer: Any) -> None:
        """A write is done with `producer`; once no write uses it, its idle time starts."""
        with self._lock:
            entry = self._entry_of(producer)
            if entry is None:
                return
            entry.users -= 1
            if entry.users > 0:
                return
            entry.idle_since = stamp = time.monotonic()
            if entry.timer is not None:
                entry.timer.cancel()
            entry.timer = threading.Timer(self.idle_timeout, self._close_if_idle, args=(producer, stamp))
            entry.timer.daemon = True
            entry.timer.start()

    def discard(self, producer: Any) -> None:
        """Forget `producer` and close it (its pipeline failed, or Ray was restarted under it)."""
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.producer is producer:
                    del self._entries[key]
                    if entry.timer is not None:
                        entry.timer.cancel()
        self.kept.close(producer)

    def close_all(self) -> None:
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            if entry.timer is not None:
                entry.timer.cancel()
            self.kept.close(entry.producer)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _entry_of(self, producer: Any) -> _Entry | None:
        return next((e for e in self._entries.values() if e.producer is producer), None)

    def _close_if_idle(self, producer: Any, stamp: float) -> None:
        with self._lock:
            entry = self._entry_of(producer)
            if entry is None or entry.users or entry.idle_since != stamp:
                return  # in use again since, or already gone
            self._entries = {k: e for k, e in self._entries.items() if e is not entry}
        self.kept.close(producer)
        self.closed_idle.set()


def _open(config: Mapping[str, Any], variant: Any = None) -> Any:
    return Producer(config)


def _alive(producer: Any) -> bool:
    """Whether a cached producer's actors still answer (Ray may have been restarted since)."""
    if producer._closed or not ray.is_initialized():
        return False
    try:
        ray.get(producer._topic_dispatcher.ping.remote(), timeout=10)
        return True
    except Exception:
        return False


def _close(producer: Any) -> None:
    if not ray.is_initialized():
        return  # its actors went with Ray
    try:
        producer.close(timeout=30)
    except Exception as exc:  # its actors may be gone with Ray already
        log.debug("closing a cached producer: %s", exc)


PRODUCER = Kept(_open, _alive, _close)
PRODUCERS = ProducerCache()
atexit.register(PRODUCERS.close_all)
