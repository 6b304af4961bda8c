"""What explains the targets the bench misses, and what would close them: copied into
BENCHMARKS.md by `report.py` when a target is missed. It names the rows of the same run that
hold the evidence; the profiles it quotes were taken apart from the bench, each with the
command that takes it again and the day it was taken."""

TEXT = """\
## Targets missed: what explains them, what would close them

**Batch produce at 1.5× confluent-kafka.** Both clients spend the same CPU a message, and two
cores carry no more. `python -m raykafka.app.bench.scaling sends --batch --rows 1000000`
(2026-11-25, 3 runs): `send_batch` at 1.56M msg/s (1.43M–1.66M) spent 1.12 µs of CPU a
message (1.06–1.20) over every process: the Flusher 0.32 (encoding the record batches), the
driver 0.25 (the Arrow columns), the broker 0.24, the ProducerResults 0.12, the dispatchers and
the Aggregator 0.11 together. confluent-kafka's `produce()` of 1,000,000 messages on the same
broker (3 runs, its process and the broker's CPU): 1.42M–1.56M msg/s at 1.07–1.11 µs a
message, 0.84–0.86 of them its own. At about 1.1 µs a message two cores top out near 1.8M
msg/s for either; 1.5× confluent would need the client's share at about 0.5 µs a message. What
would close it: less work a message in the Flusher (encoding straight from the shared column
into the request buffer) and in the driver; on a node with more cores, a second pipeline.

**Per-message `send` with keys at 1.0× aiokafka.** The full run above measured 0.98×; two runs
of only the send rows the same day measured 1.17× (99,534 (91k–106k) against 85,090
(81k–89k) msg/s) and 1.22× (101,202 (92k–108k) against 82,699 (82k–86k)), so the ratio
straddles the target with the machine's load. `python -m raykafka.app.bench.scaling sends
--keyed` (3 runs of 500,000): 14.56 µs of CPU a message (14.42–16.10), **10.0 of them in the
driver** (9.8–11.2): a future, a ledger entry and a queued row per message on the caller's
side, then each message's outcome settled and its future set, in one Python process. At about
94,000 msg/s that is one core, the driver's GIL: the limit. (Each keyed hand-over spans every
partition; the LeaderDispatcher now sends a hand-over's batches to a broker in one call, not
one per partition, which cut its and the Aggregator's CPU from 0.66 and 0.68 µs a message to
0.44 and 0.40, and the raylet's from 0.76 to 0.54.) What would close it: fewer Python objects
per message on the driver (settling a hand-over's outcomes as arrays, as `send_batch` does at
0.25 µs a message, and setting futures lazily), or `send_batch` where the caller can batch.

**Ray Data read at 2× Ray Data's `read_kafka`.** Both read at the broker's pace. The topic is
one record per batch (tansu's latest offset is the last batch's base offset + 1, where Ray
Data's `read_kafka` ends each partition). 200,000 such batches, 6 partitions, 2026-11-25:
`read_ranges` in one plain process, all six ranges at once, took 2.5 s and 3.5 s of wall time
in two runs, 0.71 and 0.70 s of its own CPU; split over two processes, 3.1 s and 4.1 s. Under
Ray Data, each of the two read tasks spent at most 0.34 s of CPU in 5.0 s of wall time. The
rest is tansu serving single-record batches (a fetch answer holds ~18,000 of them). On topics
of 10,000-record batches the Consumer, with the same decoding, reads 1.84M msg/s (its row). What would
close it: nothing on the client's side of this topic; the row compares two readers of a
broker-bound topic.

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
is warm and at its peak during the write, what a bare Ray actor process holds on this
machine, and, once the write is done, the processes' summed PSS (each shared page split among
the processes using it) and USS (their own pages): summed RSS counts the shared libraries
seven times, PSS and USS do not. Only the Flusher grows (it reads the shared column and encodes
the record batches); the rest is Ray's per-process floor, seven times over. What would close it: fewer processes (the roles that carry no data,
the topic dispatcher, retry handler and results, in one threaded actor; the leader dispatcher
beside the partition dispatcher): three processes, three floors.
"""
