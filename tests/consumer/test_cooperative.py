"""The cooperative protocol (KIP-429, `partition.assignment.strategy=cooperative-sticky`): a
member joining or leaving moves only the partitions that must move; the others stay with their
members, which never stop reading them. In-process members (`MemberRuntime`, no Ray) on the
mock cluster; on tansu beside a confluent-kafka member in test_cooperative_tansu.py."""

from __future__ import annotations

import threading

from raykafka.actors.group_member_state import MemberRuntime
from raykafka.mock import MockCluster

PARTITIONS = 4
COOPERATIVE = {"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 100,
               "session.timeout.ms": 6000, "auto.offset.reset": "earliest", "fetch.max.wait.ms": 50,
               "auto.commit.interval.ms": 200, "retry.backoff.ms": 20}


class Handled:
    """Every value handled, by whom (thread-safe), and each claim's `consume_claim` calls."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by: dict[bytes, list[str]] = {}
        self.claims_opened: dict[str, list[tuple[str, int]]] = {}

    def handler(self, name: str):
        handled = self

        class Handler:
            def setup(self, session):
                pass

            def consume_claim(self, session, claim):
                with handled.lock:
                    handled.claims_opened.setdefault(name, []).append((claim.topic, claim.partition))
                for batch in claim.batches():
                    with handled.lock:
                        for value in batch.column("value").to_pylist():
                            handled.by.setdefault(value, []).append(name)
                    session.mark_batch(batch)

            def cleanup(self, session):
                pass

        return Handler()

    def values(self) -> set[bytes]:
        with self.lock:
            return set(self.by)

    def twice(self) -> dict[bytes, list[str]]:
        with self.lock:
            return {v: who for v, who in self.by.items() if len(who) > 1}


def claimed(runtime: MemberRuntime) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in runtime.status()["claims"].items() for p in ps}


def test_a_member_joining_and_leaving_moves_only_what_must_move(kit):
    """a holds all 4 partitions; b joins: a gives up 2 (and only those: its session goes on,
    the 2 it keeps are never reopened), b takes them at the committed offsets; b leaves: a takes
    them back without giving anything up. Every value is handled exactly once."""
    handled = Handled()
    written: set[bytes] = set()

    def write(round_: int) -> None:
        for p in range(PARTITIONS):
            values = [b"r%d-p%d-%d" % (round_, p, i) for i in range(30)]
            kit.mock_produce(cluster, "t", p, values)
            written.update(values)

    with MockCluster(n_brokers=1, topics={"t": PARTITIONS}) as cluster:
        write(0)
        a = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "coop", **COOPERATIVE}, ["t"],
                          handled.handler("a"))
        a.start()
        try:
            kit.wait_for(lambda: handled.values() == written, timeout=30, what="a handling the first round")
            session, generations = a.session, a.generations
            b = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "coop", **COOPERATIVE}, ["t"],
                              handled.handler("b"))
            b.start()
            try:
                kit.wait_for(lambda: len(claimed(a)) == 2 and len(claimed(b)) == 2 and not claimed(a) & claimed(b),
                             timeout=30, what="a and b holding 2 partitions each")
                kept = claimed(a)
                write(1)
                kit.wait_for(lambda: handled.values() == written, timeout=30, what="both handling the second round")
                assert a.session is session, "a's session went on through the rebalance"
                assert a.generations >= generations + 2, "two rounds: a gave up 2, then b got them"
                assert a.revoked == 2 and b.revoked == 0
                assert a.status()["claims"] and claimed(a) == kept
            finally:
                b.stop(30)
            kit.wait_for(lambda: len(claimed(a)) == PARTITIONS, timeout=30, what="a holding every partition again")
            write(2)
            kit.wait_for(lambda: handled.values() == written, timeout=30, what="a handling the third round")
            assert a.session is session and a.revoked == 2, "b's leaving revoked nothing of a's"
            with handled.lock:
                opened_by_a = handled.claims_opened["a"]
            assert sorted(opened_by_a) == sorted([("t", p) for p in range(PARTITIONS)] + sorted(set(
                ("t", p) for p in range(PARTITIONS)) - kept)), "a opened each partition it kept once"
        finally:
            a.stop(30)
    assert handled.twice() == {}, "every value handled once"
    assert handled.values() == written

