"""Ray Data executions raykafka starts itself, kept off the terminal.

`write_dataset` (and `write_kafka`, through it) iterates the caller's Dataset to hand its
blocks on. Ray Data announces every execution on the terminal: its plan, its progress, the
seconds it took (about ten lines for each stream trigger that writes). Those lines are about
an execution the user did not start, so they go to Ray Data's own log file only, where Ray
Data keeps everything it logs. An execution the user starts (`ds.count()` in a stream's step,
`ds.write_datasink(...)`) prints as Ray Data always does.

How: `quietly(ds)` is a copy of the Dataset (the same plan and context, a Dataset id of its
own) whose execution prints no progress; `OwnExecutionsFilter`, on each of the `ray.data`
logger's handlers that write to the terminal, drops the lines that name that copy's Dataset
id, whichever thread logs them (Ray Data names its executor thread after the id). The file
handler gets every line, as before.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

RAY_DATA_LOGGER = "ray.data"

PROGRESS_OFF_NOTICE = "Progress bars disabled"
"""How Ray Data's one-time notice begins when an execution's context turns progress off
(which the copy's does): about our setting, not the user's, so it is dropped as well."""


RECENT_EXECUTIONS = 64
"""Dataset ids the filter remembers: the writes of a process, the newest ones (a line Ray Data
logs after the iteration ended, such as the execution's time, still finds its id)."""


class OwnExecutionsFilter(logging.Filter):
    """Drops, on a terminal handler, Ray Data's lines about the executions raykafka runs."""

    def __init__(self) -> None:
        super().__init__()
        self._ids: deque[str] = deque(maxlen=RECENT_EXECUTIONS)

    def add(self, dataset_uuid: str) -> None:
        self._ids.append(dataset_uuid)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._ids:
            return True
        text = record.getMessage()
        if text.startswith(PROGRESS_OFF_NOTICE):
            return False
        return not any(i in text or i in record.threadName for i in tuple(self._ids))


OWN_EXECUTIONS = OwnExecutionsFilter()


def quietly(ds: Any) -> Any:
    """A copy of Dataset `ds` to iterate, whose execution's lines stay off the terminal (see the
    module's docstring); `ds` itself is left as it was."""
    from ray.data import Dataset  # deferred, as everywhere: ray.data is heavy to import
    from ray.data._internal.logging import SessionFileHandler  # its console handler has no class of its own

    if not isinstance(ds, Dataset):
        raise TypeError(f"expected a ray.data.Dataset, not {type(ds).__name__}")
    # Dataset.copy: a new Dataset over the same plan, with a copy of its context and an id of its
    # own (Ray Data's internal API: no public call gives one without adding a step to the plan)
    own = Dataset.copy(ds, _deep_copy=True)
    own.context.enable_progress_bars = False  # the copy's context only
    for handler in logging.getLogger(RAY_DATA_LOGGER).handlers:
        if not isinstance(handler, SessionFileHandler) and OWN_EXECUTIONS not in handler.filters:
            handler.addFilter(OWN_EXECUTIONS)
    OWN_EXECUTIONS.add(own._get_uuid())  # each execution's id is `{name}_{uuid}_{run}`
    return own
