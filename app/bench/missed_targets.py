"""What explains each target the bench misses, and what would close it: `report.py` copies
into BENCHMARKS.md the profile of every target the run missed. Each names the rows of the same
run that hold the evidence; the profiles it quotes were taken apart from the bench, each with
the command that takes it again and the day it was taken."""

HEADING = "## Targets missed: what explains them, what would close them"

LATENCY = (
    "**Send → acknowledgement latency at `linger.ms=0`.** A message crosses five processes on its\n"
    "way (the driver's sender, the topic's PartitionDispatcher, its LeaderDispatcher, the broker's\n"
    "Aggregator and Flusher), and its acknowledgement two more (the ProducerResults, then the\n"
    "driver's results thread); each hop is a Ray actor call. One call chain per message is more than\n"
    "two cores carry at the bench's rate, so the sender coalesces as Nagle's rule does: while\n"
    "messages it handed over are unanswered, new ones gather (up to 50 ms). The latency table's\n"
    "row \"Nagle wait off\" is the same keyed run with that wait switched off: what the rule saves.\n"
    "What would close the gap: fewer hops for a partition whose pipeline is warm (the driver, or one\n"
    "actor per broker, encoding and sending the Produce request itself, with the dispatchers kept\n"
    "for routing, retries and leader moves), or Ray's compiled graphs between the fixed stages.")

# a target's text, as report.py's table names it -> its profile
PROFILES: dict[str, str] = {
    "batch produce 100 B ≥ 1.5× confluent-kafka produce()": (
        "**Batch produce at 1.5× confluent-kafka.** Both clients spend the same CPU a message, and two\n"
        "cores carry no more. `python -m raykafka.app.bench.scaling sends --batch --rows 1000000`\n"
        "(2026-11-25, 3 runs): `send_batch` at 1.56M msg/s (1.43M–1.66M) spent 1.12 µs of CPU a\n"
        "message (1.06–1.20) over every process: the Flusher 0.32 (encoding the record batches), the\n"
        "driver 0.25 (the Arrow columns), the broker 0.24, the ProducerResults 0.12, the dispatchers and\n"
        "the Aggregator 0.11 together. confluent-kafka's `produce()` of 1,000,000 messages on the same\n"
        "broker (3 runs, its process and the broker's CPU): 1.42M–1.56M msg/s at 1.07–1.11 µs a\n"
        "message, 0.84–0.86 of them its own. At about 1.1 µs a message two cores top out near 1.8M\n"
        "msg/s for either; 1.5× confluent would need the client's share at about 0.5 µs a message. What\n"
        "would close it: less work a message in the Flusher (encoding straight from the shared column\n"
        "into the request buffer) and in the driver; on a node with more cores, a second pipeline."),
    "per-message send with keys ≥ 1.0× aiokafka with keys": (
        "**Per-message `send` with keys at 1.0× aiokafka.** The ratio moves with the machine's load:\n"
        "0.98× in a full run of 2026-11-24, 1.17× and 1.22× in runs of only the send rows and 1.10× in\n"
        "a full run on 2026-11-25. `python -m raykafka.app.bench.scaling sends\n"
        "--keyed` (3 runs of 500,000): 14.56 µs of CPU a message (14.42–16.10), **10.0 of them in the\n"
        "driver** (9.8–11.2): a future, a ledger entry and a queued row per message on the caller's\n"
        "side, then each message's outcome settled and its future set, in one Python process. At about\n"
        "94,000 msg/s that is one core, the driver's GIL: the limit. (Each keyed hand-over spans every\n"
        "partition; the LeaderDispatcher now sends a hand-over's batches to a broker in one call, not\n"
        "one per partition, which cut its and the Aggregator's CPU from 0.66 and 0.68 µs a message to\n"
        "0.44 and 0.40, and the raylet's from 0.76 to 0.54.) What would close it: fewer Python objects\n"
        "per message on the driver (settling a hand-over's outcomes as arrays, as `send_batch` does at\n"
        "0.25 µs a message, and setting futures lazily), or `send_batch` where the caller can batch."),
    "Ray Data path read ≥ 2× Ray Data read_kafka": (
        "**Ray Data read at 2× Ray Data's `read_kafka`.** Both read at the broker's pace. The topic is\n"
        "one record per batch (tansu's latest offset is the last batch's base offset + 1, where Ray\n"
        "Data's `read_kafka` ends each partition). 200,000 such batches, 6 partitions, 2026-11-25:\n"
        "`read_ranges` in one plain process, all six ranges at once, took 2.5 s and 3.5 s of wall time\n"
        "in two runs, 0.71 and 0.70 s of its own CPU; split over two processes, 3.1 s and 4.1 s. Under\n"
        "Ray Data, each of the two read tasks spent at most 0.34 s of CPU in 5.0 s of wall time. The\n"
        "rest is tansu serving single-record batches (a fetch answer holds ~18,000 of them). On topics\n"
        "of 10,000-record batches the Consumer, with the same decoding, reads 1.84M msg/s (its row). What would\n"
        "close it: nothing on the client's side of this topic; the row compares two readers of a\n"
        "broker-bound topic."),
    "p99 latency ≤ 2× confluent-kafka's": LATENCY,
    "p99 latency with keyed ≤ 2× confluent-kafka's": LATENCY,
    "producer actors' peak RSS ≤ 400 MiB": (
        "**Producer memory.** The memory row's note gives each role's resident memory once the pipeline\n"
        "is warm and at its peak during the write, what a bare Ray actor process holds on this\n"
        "machine, and, once the write is done, the processes' summed PSS (each shared page split among\n"
        "the processes using it) and USS (their own pages): summed RSS counts the shared libraries\n"
        "seven times, PSS and USS do not. Only the Flusher grows (it reads the shared column and encodes\n"
        "the record batches); the rest is Ray's per-process floor, seven times over. What would close it: fewer processes (the roles that carry no data,\n"
        "the topic dispatcher, retry handler and results, in one threaded actor; the leader dispatcher\n"
        "beside the partition dispatcher): three processes, three floors."),
}


def section(missed: list[str]) -> str:
    """The heading and each missed target's profile, once each, in the order of `missed`."""
    seen: list[str] = []
    for target in missed:
        profile = PROFILES.get(target)
        if profile is not None and profile not in seen:
            seen.append(profile)
    return "\n\n".join([HEADING, *seen]) if seen else ""
