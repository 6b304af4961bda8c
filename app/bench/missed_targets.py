"""What explains the targets the bench misses, and what would close them: copied into
BENCHMARKS.md by `report.py` when a target is missed. It names the rows of the same run that
hold the evidence; it carries no figure of its own."""

TEXT = """\
## Targets missed: what explains them, what would close them

**Send → acknowledgement latency at `linger.ms=0`.** A message crosses five processes on its
way (the driver's sender, the topic's PartitionDispatcher, its LeaderDispatcher, the broker's
Aggregator and Flusher), and its acknowledgement two more (the ProducerResults, then the
driver's results thread); each hop is a Ray actor call. One call chain per message is more than
two cores carry at the bench's rate, so the sender coalesces as Nagle's rule does: while
messages it handed over are unanswered, new ones gather (up to 50 ms). The latency table's
row "Nagle wait off" is the same keyed run with that wait switched off: what the rule saves.
What would close the gap: fewer hops for a partition whose pipeline is warm (the driver, or one
actor per broker, encoding and sending the Produce request itself, with the dispatchers kept
for routing, retries and leader moves), or Ray's compiled graphs between the fixed stages.

**Producer memory.** The memory row's note gives each role's resident memory once the pipeline
is warm and at its peak during the write, and what a bare Ray actor process holds on this
machine. Only the Flusher grows (it reads the shared column and encodes the record batches);
the rest is Ray's per-process floor, seven times over (summed RSS also counts the shared
libraries seven times). What would close it: fewer processes (the roles that carry no data,
the topic dispatcher, retry handler and results, in one threaded actor; the leader dispatcher
beside the partition dispatcher): three processes, three floors.
"""
