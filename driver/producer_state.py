"""`ProducerState`: the lock, conditions and flags one `Producer` and its threads share.

One per Producer, made by it and handed to each of its rooms: the sender thread
(driver/producer_sender.py), the settlement of outcomes (driver/producer_settlement.py), the
results thread (driver/producer_poller.py) and the healer (driver/producer_healer.py). Each room
reads and writes the flags under `cond`; the object itself holds no rule, so that no room has to
import another (or the facade) to reach them. Calls nothing; Ray-free.

`lock` guards the `Ledger` held here (every message accepted and not yet ended), the
Producer's accumulator and every flag below; `cond` is the condition on it every thread of the
Producer waits on. `futures_condition` is the futures' own (driver/message_futures.py).
"""

from __future__ import annotations

import threading
from typing import Any

from .producer_ledger import Ledger


class ProducerState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.futures_condition = threading.Condition()
        self.ledger = Ledger()  # every message accepted and not yet ended; buffer.memory
        self.flush_now = False
        self.expired_gathered = False  # the watchdog ended messages still gathered: cut them out before handing on
        self.settling = 0
        self.closed = False  # no new sends
        self.stopping = False  # the pipeline is being shut down on purpose
        self.results_stopped = False  # close takes the last reports itself
        self.healing = False  # the sender and the results thread wait while it is set
        self.heal_cause = ""  # what the heal under way (or the last one) was asked for
        self.sender_busy = False  # the sender is handing batches on, outside the lock
        self.polling = False  # the results thread is taking or settling reports, outside the lock
        self.torn_down = False  # a heal kills the old pipeline's actors before it starts the next
        # the pipeline in use and its TopicRoutes (a ProducerPipeline and a TopicRoutes; Any here,
        # so that this module stays Ray-free), replaced together by the Producer under `cond`
        self.pipeline: Any = None
        self.routes: Any = None

    def wake(self) -> None:
        """Wake every thread waiting on `cond`."""
        with self.cond:
            self.cond.notify_all()
