"""Topics subscribed by name or by pattern: the one matching rule of every reader.

A subscribed name that starts with `^` is a pattern, as librdkafka reads it (`^orders-.*`): a
regular expression that a topic's whole name must match, as Java's `subscribe(Pattern)` and
Spark's `subscribePattern` match it. Internal topics are never matched.

Called by the `Consumer` (driver/consumer.py, `assign_topic`), the group member
(actors/group_member_state.py, whose subscription is looked up again every `metadata.max.age.ms`) and
the Spark and Ray Data bridges' `subscribe_pattern` (spark_bridge/offsets.py). Calls nothing of
ours but the errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

PATTERN_PREFIX = "^"  # librdkafka's mark of a pattern among subscribed names


def is_pattern(name: str) -> bool:
    return name.startswith(PATTERN_PREFIX)


def compile_pattern(pattern: str, what: str = "topic pattern") -> re.Pattern[str]:
    """`pattern` compiled, or a `ConfigError` naming `what` and why it is no regular expression."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{what}: {pattern!r} is not a regular expression ({exc})") from exc


def matching_topics(pattern: re.Pattern[str], existing: Iterable[str]) -> list[str]:
    """The topics of `existing` whose whole name matches `pattern`, sorted."""
    return sorted(t for t in existing if pattern.fullmatch(t))


def external_topics(topics: Mapping[str, Any]) -> list[str]:
    """The names of a Metadata answer's topics (`TopicInfo`s by name) that exist and are not
    internal."""
    return [name for name, info in topics.items() if not info.is_internal and not info.error_code]


@dataclass(frozen=True)
class TopicSubscription:
    """What a reader subscribed to: names, and patterns (the names that start with `^`)."""

    names: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, topics: Iterable[str] | str) -> TopicSubscription:
        given = [topics] if isinstance(topics, str) else list(topics)
        return cls(tuple(sorted({t for t in given if not is_pattern(t)})),
                   tuple(compile_pattern(t) for t in dict.fromkeys(given) if is_pattern(t)))

    @property
    def has_patterns(self) -> bool:
        return bool(self.patterns)

    def topics(self, existing: Iterable[str] = ()) -> list[str]:
        """The names, and every topic of `existing` (give it `external_topics`) that a pattern
        matches, sorted."""
        existing = list(existing)
        return sorted(set(self.names).union(*(matching_topics(p, existing) for p in self.patterns)))

    def __str__(self) -> str:
        return ",".join([*self.names, *(p.pattern for p in self.patterns)])
