"""raykafka: a Kafka client for Ray.

The repository root is this package. `raykafka.wire` is the Kafka driver without Ray;
`raykafka.actors` the Ray actors; `raykafka.driver` what a driver program touches;
`raykafka.spark_bridge` the RayDP and Ray Data bridges.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public names, imported on first use so that `import raykafka.wire` does not start Ray.
_EXPORTS = {
    "Producer": "raykafka.driver.producer",
    "Consumer": "raykafka.driver.consumer",
    "ConsumerGroup": "raykafka.driver.consumer_group",
    "Admin": "raykafka.driver.admin",
    "EmbeddedBroker": "raykafka.driver.embedded_broker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raykafka' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
