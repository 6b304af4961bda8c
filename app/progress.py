"""Progress bars for long commands (`produce` from a file or stdin, `consume -c/-e`): tqdm's, drawn
on stderr, and only when stderr is a terminal, so that pipes, files and CI logs get none.

Called by cli_produce.py and cli_consume.py; a command that also prints lines where the bar is
drawn writes them inside `printing()`, which lifts the bar for the write and draws it again below.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from tqdm import tqdm


def on_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def bar(desc: str, total: int | None = None, unit: str = "msg", unit_scale: bool = False,
        enabled: bool = True) -> tqdm:
    """A bar on stderr, silent unless `enabled` and stderr is a terminal; close it when done."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=sys.stderr,
                disable=not (enabled and on_terminal(sys.stderr)), leave=False, dynamic_ncols=True,
                mininterval=0.2)


@contextlib.contextmanager
def printing(progress: tqdm) -> Iterator[None]:
    """Write to stdout inside this: a bar drawn on the same terminal is lifted, then redrawn."""
    if progress.disable or not on_terminal(sys.stdout):
        yield
        return
    with tqdm.external_write_mode(file=sys.stdout):
        yield
