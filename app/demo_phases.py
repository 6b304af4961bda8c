"""Where `raykafka demo`'s time went: the write's and the read's phases as spans of the demo's
time line, worked out once (`DemoPhases`) and read by both the demo's lines (`DemoPhases.lines`,
`demo.write_line`, `demo.read_line`, the summary) and its plot (`demo.draw_rates`), so that a
figure in the text is the figure in the picture. Ray-free: plain numbers in, plain numbers out.

A side's phases come from its boundaries (`Side.of`): each phase ends where the next begins, the
last at the side's end, so they add up to the side's total. A boundary the run did not see
(None) joins its phase to the next, whose name and description then say both ("Spark's job +
hand-over"). A boundary seen out of order (the writers' clocks are their nodes') is held between
its neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """A phase as the demo names it: whose time it is, and what happens in it."""

    name: str
    whose: str
    what: str


WRITE_STEPS = (
    Step("Spark's job", "Spark", "makes the rows, and RayDP's Arrow batches of them, cached in Spark"),
    Step("hand-over", "RayDP", "Ray tasks fetch Spark's partitions into Ray's object store"),
    Step("pipeline start", "raykafka", "the node writers and their producers' actors start"),
    Step("first message", "raykafka and the broker", "the topic's stages start, rows go out; to the first acknowledgement"),
    Step("Kafka write", "raykafka and the broker", "to the last block acknowledged"),
    Step("release", "RayDP", "Spark's cached batches unpersisted"),
)
READ_STEPS = (
    Step("group forming", "the broker and raykafka", "the members start, join and get partitions; to the first record"),
    Step("reading", "raykafka and the broker", "to the last record"),
    Step("group close", "raykafka", "the members leave and stop (and the demo's poll, every 0.2 s, sees the end)"),
)


@dataclass(frozen=True)
class Phase:
    """One span of a side: [start, end) in seconds on the demo's time line."""

    name: str
    whose: str
    what: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def figure(self) -> str:
        """Its seconds as the text and the plot both show them."""
        return f"{self.seconds:.2f}s"


@dataclass(frozen=True)
class Side:
    """The write or the read: its rows, its span, and its phases, which tile the span."""

    name: str
    rows: int
    start: float
    end: float
    phases: tuple[Phase, ...]

    @classmethod
    def of(cls, name: str, rows: int, start: float, end: float, steps: Sequence[Step],
           ends: Sequence[float | None]) -> Side:
        """`steps[i]` ends at `ends[i]`, the last step at `end` (so one end fewer than steps);
        an end of None joins its step to the next; each end is held within [the one before, `end`]."""
        if len(ends) != len(steps) - 1:
            raise ValueError(f"{len(steps)} steps need {len(steps) - 1} ends, not {len(ends)}")
        phases, joined, at = [], [], start
        for step, until in zip(steps, [*ends, end], strict=True):
            joined.append(step)
            if until is None:
                continue
            until = min(max(until, at), end)
            whose = []
            for s in joined:
                whose += [w for w in s.whose.split(" and ") if w not in whose]
            phases.append(Phase(" + ".join(s.name for s in joined), " and ".join(whose),
                                "; then ".join(s.what for s in joined), at, until))
            joined, at = [], until
        return cls(name, rows, start, end, tuple(phases))

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        """Rows a second over the whole side."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def rate_figure(self) -> str:
        """Its rate as the text and the plot both show it."""
        return f"{self.rate:,.0f} rows/s"

    def share(self, phase: Phase) -> float:
        return phase.seconds / self.seconds if self.seconds > 0 else 0.0

    def legend(self) -> str:
        """The plot's label for this side's rates."""
        return f"{self.name} ({self.rate_figure} overall)"

    def label(self, phase: Phase) -> str:
        """The plot's label for one phase: the text's figures, in the text's words."""
        return f"{self.name}: {phase.name} {phase.figure} ({self.share(phase):.0%})"


@dataclass(frozen=True)
class DemoPhases:
    """Both sides; what the demo prints after its summary and what `--plot` draws."""

    write: Side
    read: Side

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.write, self.read

    def lines(self) -> list[str]:
        """An aligned table: a line per side (its total), then one per phase: name, seconds,
        share of the side's total, whose time it is and what happens in it."""
        width = max(len(p.name) for side in self.sides for p in side.phases)
        out = []
        for side in self.sides:
            out.append(f"time     the {side.name}'s {side.seconds:.2f}s, phase by phase")
            for p in side.phases:
                out.append(f"           {p.name:<{width}}  {p.figure:>7}  {side.share(p):>4.0%}  {p.whose}: {p.what}")
        return out
