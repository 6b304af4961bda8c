"""actors: the Ray actors, one module per role.

The producer, in the order messages flow (Sarama's pipeline):
`topic_dispatcher` (one) → `partition_dispatcher` (one, a partitioner per topic) →
`leader_dispatcher` (one, a retry state machine per partition of every topic) → `broker_worker`
(one per broker, the aggregator and the flusher in one process; past `broker.worker.actors`
workers, one hosts several brokers), with `retry_handler` (one; it
loops failed messages back into the topic dispatcher). No actor only collects results: each
broker worker and the retry handler keep the outcomes they decide in a `producer_results.Mailbox`,
and the driver long-polls them. `batch` is the columnar batch they pass, `options` their `ray.remote` options,
`calls` the bound on calls in flight between stages.
"""
