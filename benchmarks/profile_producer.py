"""Where the producer spends its time: py-spy on the driver and every actor process while it writes.

    python -m raykafka.benchmarks.profile_producer [--mode batch|send|keyed|consume] [--messages 300000] [--size 100]
        [--compression none] [--out /tmp/prof]

Writes one collapsed-stack file per process (`py-spy record --format raw`) and prints, for each
process, the functions with the most samples (self and inclusive). Needs `pip install py-spy`.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time


def top(path: str, n: int = 12) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            k = int(count)
            total += k
            frames = [fr.split(" (")[0] + " " + fr.split("/")[-1].rstrip(")") for fr in stack.split(";")]
            own[frames[-1]] += k
            for fr in set(frames):
                incl[fr] += k
    return total, own.most_common(n), incl.most_common(n)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["batch", "send", "keyed", "consume"], default="batch")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--out", default="/tmp/prof")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--compression", default="none", help="compression.type")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import pyarrow as pa
    import ray
    import ray._private.state as state

    from raykafka.driver.admin import Admin
    from raykafka.driver.consumer import Consumer
    from raykafka.driver.embedded_broker import EmbeddedBroker
    from raykafka.driver.producer import Producer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    n = args.messages
    half = args.size // 2
    value = os.urandom(half).hex().encode()[:half] + b"x" * (args.size - half)
    with EmbeddedBroker() as broker, Admin(broker.bootstrap) as admin:
        topic = f"prof-{os.getpid()}"
        admin.create_topics({topic: 6})
        linger = {"linger.ms": 5} if args.mode == "keyed" else {}  # as the bench's keyed row
        with Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "compression.type": args.compression,
                       **linger}) as producer:
            assert producer.send_batch(topic, [b"w"] * 6, partitions=list(range(6))).result(60).ok
            if args.mode == "consume":
                table = pa.table({"value": pa.array([value] * n, pa.binary())})
                assert producer.send_batch(topic, table).result(300).ok
            procs = {info["Pid"]: (info.get("Name") or info["ActorClassName"]).split("/")[-1]
                     for info in state.actors().values() if info.get("State") == "ALIVE"}
            if args.mode == "consume":
                consumer = Consumer({"bootstrap.servers": broker.bootstrap})
                consumer.assign_topic(topic, "earliest")
                already = next(consumer.batches(timeout=30)).num_rows  # the consumer's actors are up
                procs = {info["Pid"]: (info.get("Name") or info["ActorClassName"]).split("/")[-1]
                         for info in state.actors().values() if info.get("State") == "ALIVE"}
            procs[os.getpid()] = "driver"
            spies = {pid: subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "200",
                                            "--output", f"{args.out}/{name}-{pid}.txt", "--nonblocking"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for pid, name in procs.items()}
            time.sleep(1.0)  # py-spy attaches
            start = time.perf_counter()
            if args.mode == "batch":
                table = pa.table({"value": pa.array([value] * n, pa.binary())})
                assert producer.send_batch(topic, table).result(300).ok
            elif args.mode in ("send", "keyed"):
                from raykafka.app.bench.workload import KEYS

                keys = KEYS if args.mode == "keyed" else [None]  # as the bench's
                for i in range(n):
                    producer.send(topic, value, key=keys[i % len(keys)])
                assert producer.flush(300) == 0
            else:
                got = already
                for batch in consumer.batches(timeout=30):
                    got += batch.num_rows
                    if got >= n:
                        break
            elapsed = time.perf_counter() - start
            for spy in spies.values():
                spy.send_signal(2)
            for spy in spies.values():
                spy.wait(30)
            if args.mode == "consume":
                consumer.close()
    ray.shutdown()
    print(f"{args.mode}: {n:,} messages in {elapsed:.2f}s = {n / elapsed:,.0f} msg/s")
    for pid, name in procs.items():
        path = f"{args.out}/{name}-{pid}.txt"
        if not os.path.exists(path):
            continue
        total, own, incl = top(path)
        if total < 20:
            continue
        print(f"\n== {name} (pid {pid}): {total} samples")
        print("  self:  " + "\n         ".join(f"{c / total:5.1%} {f}" for f, c in own[:8]))
        print("  incl:  " + "\n         ".join(f"{c / total:5.1%} {f}" for f, c in incl[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
