"""A scripted, stateful mock Kafka cluster, for fault scenarios one real broker cannot produce
(as franz-go's kfake is to its client).

It imports only `raykafka.wire` (the protocol declarations and record batches it serves) and never
Ray: test code, client loops and Ray actors all reach its brokers over TCP. `cluster.py` holds
`MockCluster` (one per test), its `MockBroker`s and the state they share.
"""

from __future__ import annotations

from .cluster import MockBroker, MockCluster, PartitionState, TopicState

__all__ = ["MockBroker", "MockCluster", "PartitionState", "TopicState"]
