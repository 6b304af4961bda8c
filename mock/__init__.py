"""A scripted, stateful mock Kafka cluster, for fault scenarios one real broker cannot produce
(as franz-go's kfake is to its client).

It imports only `raykafka.wire` (the protocol declarations and record batches it serves) and never
Ray: test code, client loops and Ray actors all reach its brokers over TCP. `cluster.py` holds
`MockCluster` (one per test) over one file per API area: its `MockBroker`s (`broker.py`), the
state they share (`state.py`), the fault controls (`faults.py`) and the default handlers
(`handlers_*.py`).
"""

from __future__ import annotations

from .broker import MockBroker
from .cluster import MockCluster
from .state import PartitionState, TopicState

__all__ = ["MockBroker", "MockCluster", "PartitionState", "TopicState"]
