"""The targets the bench has missed, with what explains each and what would close it: measured
apart from a bench run and copied into BENCHMARKS.md by `report.py` when a target is missed."""

TEXT = """\
## Targets missed: what explains them, what would close them

Measured apart from the run above, on the same machine (2 CPUs), with the figures said where
they were taken; `raykafka bench` copies this section in as it is.

**Send → acknowledgement latency at `linger.ms=0`.** A message crosses five processes on its
way (the driver's sender, the topic's PartitionDispatcher, its LeaderDispatcher, the broker's
Aggregator and Flusher), and its acknowledgement two more (the ProducerResults, then the
driver's results thread); each hop is a Ray actor call. At 2,000 msg/s one call chain per
message is more than two cores carry, so the sender coalesces as Nagle's rule does: while
messages it handed over are unanswered, new ones gather (up to 50 ms). Switching that off
makes it far worse. Keyed, 3 runs each, alternated in one process while other work ran on the
machine: with the rule p50 21.6–30.9 ms, p99 48–158 ms; without it p50 173–290 ms, p99
278–705 ms (confluent-kafka in the same runs: p50 0.16–0.85 ms, p99 8–335 ms). What would
close it: fewer hops for a partition whose pipeline is warm: the driver (or one actor per
broker) encoding and sending the Produce request itself, with the dispatchers kept for
routing, retries and leader moves; or Ray's compiled graphs between the fixed stages.

**Producer memory.** A Ray actor process with nothing in it holds 125 MiB RSS here (58 MiB of
it its own, 77 MiB proportional share). Peak RSS per role during a `send_batch` of 1,000,000
100-byte messages, two runs, warm → peak MiB: aggregator 143→144, flusher 180→286,
leader_dispatcher 131→131, partition_dispatcher 129→131, producer_results 128→130,
retry_handler 131→131, topic_dispatcher 130→130; 1,082 MiB in all. Only the Flusher grows (it
reads the shared column and encodes the record batches); the rest is seven times Ray's
per-process floor, which summed RSS also counts the shared libraries of seven times. What would
close it: fewer processes: the roles that carry no data (topic dispatcher, retry handler,
results) in one threaded actor, and the leader dispatcher beside the partition dispatcher,
which leaves three processes, about 400 MiB.
"""
