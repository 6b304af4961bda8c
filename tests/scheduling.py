"""How the suite's tests are handed to pytest-xdist's parallel workers (`-n 2` in
pyproject.toml's addopts; tests/conftest.py's hooks call this).

- A module's tests all go to one worker, in order, as with `--dist loadfile`: its fixtures
  (a producer shared by its tests, say) start once.
- tests/spark's modules all go to one worker (`TOGETHER`): they share that worker's one Spark
  session, which a second worker would start again (a JVM, RayDP's master and an executor).
- The units go out longest first, by the seconds the kept run (tests/records/suite-run.xml.gz,
  what docs/tests.md is written from; slow-run.xml.gz for the slow tier) says their tests took;
  a unit it does not know goes after them, in the order collected. A long module that starts
  last keeps one worker busy while the other has nothing left: the longest first end together
  (the longest-processing-time rule).

Called by: tests/conftest.py. Calls: tests/timings.py, to read the kept run.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from .timings import cases

RECORD = Path(__file__).parent / "records" / "suite-run.xml.gz"
SLOW_RECORD = Path(__file__).parent / "records" / "slow-run.xml.gz"  # the slow tier's, for a run of it
TOGETHER = ("tests/spark/",)  # folders whose modules are one unit of work


def unit_of(nodeid_or_module: str) -> str:
    """The unit a test goes out in: its module, or the folder of `TOGETHER` it is in."""
    module = nodeid_or_module.split("::", 1)[0]
    return next((folder for folder in TOGETHER if module.startswith(folder)), module)


def recorded_seconds(record: Path = RECORD) -> dict[str, float]:
    """Each unit's seconds in the kept run; empty if there is none."""
    if not record.exists():
        return {}
    seconds: dict[str, float] = defaultdict(float)
    for case in cases(record)[0]:
        seconds[unit_of(case.module)] += case.seconds
    return dict(seconds)


def longest_first(items: list[Any], seconds: dict[str, float]) -> list[Any]:
    """`items` (pytest's, with a `nodeid`) by unit, the units the kept run says took longest
    first; each unit's tests in the order collected, and the units it does not know last."""
    units = {id(item): unit_of(item.nodeid) for item in items}
    order: dict[str, int] = {}
    for unit in units.values():
        order.setdefault(unit, len(order))
    return sorted(items, key=lambda item: (-seconds.get(units[id(item)], -1.0), order[units[id(item)]]))


def make_scheduler(config: Any, log: Any) -> Any:
    """pytest-xdist's scheduler by `unit_of`, in the order collected (which `longest_first` set)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # its own order puts the modules of most tests first
    return ByUnit(config, log)
