"""How many members a group that sizes itself by lag wants (`ConsumerGroup(..., members=(lo, hi))`).

Ray-free: `LagScaling.decide` is given the group's lag (records fetched by nobody's handler yet:
each claimed partition's high watermark less its handled offset, summed over the members), its
size and its partition count, at a moment, and answers the size it wants then, or None to stay.
The `ConsumerGroup`'s scaler thread asks it every `SCALE_CHECK_S` and scales.

The rule, as KEDA's Kafka scaler sizes a deployment, held for a while so that a moment's burst
does not move partitions:
- it grows when the lag has stayed above `lag_per_member` records a member for `grow_after_s`:
  to ceil(lag / lag_per_member) members;
- it shrinks by one when the lag has stayed at 0 (every member idle) for `shrink_after_s`;
- never below `lo`, never above `hi` nor the partition count (a member beyond it would idle);
- after it scales, it waits for the group to settle (every member in one generation, every
  partition claimed) before it judges again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCALE_CHECK_S = 1.0  # seconds between the scaler's looks at the group's lag
LAG_PER_MEMBER = 10_000  # records of lag one member is expected to carry
GROW_AFTER_S = 5.0  # the lag must stay above the bound this long before the group grows
SHRINK_AFTER_S = 30.0  # every member must stay idle this long before the group shrinks


@dataclass
class LagScaling:
    lo: int
    hi: int
    lag_per_member: int = LAG_PER_MEMBER
    grow_after_s: float = GROW_AFTER_S
    shrink_after_s: float = SHRINK_AFTER_S
    _behind_since: float | None = None  # since when the lag has been above the bound
    _idle_since: float | None = None  # since when the lag has been 0

    def __post_init__(self) -> None:
        if not 1 <= self.lo <= self.hi:  # with no member there is no lag to grow by
            raise ValueError(f"members: (min, max) with 1 <= min <= max, got ({self.lo}, {self.hi})")
        if self.lag_per_member < 1:
            raise ValueError(f"lag_per_member: must be at least 1, got {self.lag_per_member}")

    def decide(self, now: float, lag: int, members: int, partitions: int, settled: bool) -> int | None:
        """The size the group wants at `now`, or None to stay as it is."""
        ceiling = max(1, min(self.hi, partitions)) if partitions else self.hi
        if not settled:  # a rebalance under way: its lag says nothing yet
            self._behind_since = self._idle_since = None
            return None
        wanted = min(ceiling, max(self.lo, math.ceil(lag / self.lag_per_member)))
        if lag > self.lag_per_member * members and wanted > members:
            self._idle_since = None
            self._behind_since = now if self._behind_since is None else self._behind_since
            if now - self._behind_since >= self.grow_after_s:
                self._behind_since = None
                return wanted
            return None
        self._behind_since = None
        if lag == 0 and members > self.lo:
            self._idle_since = now if self._idle_since is None else self._idle_since
            if now - self._idle_since >= self.shrink_after_s:
                self._idle_since = None
                return members - 1
            return None
        self._idle_since = None
        return None
