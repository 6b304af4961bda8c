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


def started(cluster, handled: Handled, name: str) -> MemberRuntime:
    """A cooperative member of group "coop" on topic "t", handling into `handled` as `name`, started."""
    member = MemberRuntime({"bootstrap.servers": cluster.bootstrap, "group.id": "coop", **COOPERATIVE}, ["t"],
                           handled.handler(name))
    member.start()
    return member


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
        a = started(cluster, handled, "a")
        try:
            kit.wait_for(lambda: handled.values() == written, timeout=30, what="a handling the first round")
            session, generations = a.session, a.generations
            b = started(cluster, handled, "b")
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



class GroupScript:
    """Scripted JoinGroup, SyncGroup and OffsetCommit answers around the mock's own: what each
    member sent and when, and, as a broker may, a commit refused with ILLEGAL_GENERATION while
    its member's join is under way (from its JoinGroup to a SyncGroup answered with an
    assignment), once that member's SyncGroup was refused."""

    def __init__(self, cluster, follower_sync_delay: float = 0.0):
        import asyncio
        import time

        from raykafka.wire import messages
        from raykafka.wire.errors import BY_NAME

        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, int]] = []  # (time, member, request, answer's code)
        self.joining: set[str] = set()
        self.refuse_sync_of: str | None = None  # the next SyncGroup of that member: REBALANCE_IN_PROGRESS
        self.refused_sync: str | None = None  # whose SyncGroup was refused: its commits, until it has joined
        self.refused_commits = 0
        self.leader = ""
        rebalancing, illegal = BY_NAME["REBALANCE_IN_PROGRESS"].code, BY_NAME["ILLEGAL_GENERATION"].code
        default = cluster.default_handlers

        def note(member: str, request: str, code: int) -> None:
            with self.lock:
                self.events.append((time.monotonic(), member, request, code))

        async def join(version, body, broker):
            with self.lock:
                self.joining.add(body.member_id)
            answer = await default[messages.JOIN_GROUP.key](version, body, broker)
            if answer["error_code"] == 0:
                self.leader = answer["leader"]
            note(answer["member_id"], "join", answer["error_code"])
            return answer

        async def sync(version, body, broker):
            if follower_sync_delay and body.member_id != self.leader:
                await asyncio.sleep(follower_sync_delay)  # a broker that looks at a waiting SyncGroup now and then
            with self.lock:
                refuse = body.member_id == self.refuse_sync_of
                if refuse:
                    self.refuse_sync_of = None
            if refuse:
                await asyncio.sleep(0.5)  # held, as a broker holds a SyncGroup, while a commit queues behind it
                answer = {"throttle_time_ms": 0, "error_code": rebalancing, "protocol_type": "consumer",
                          "protocol_name": None, "assignment": b""}
            else:
                answer = await default[messages.SYNC_GROUP.key](version, body, broker)
            with self.lock:
                if answer["error_code"] == 0:
                    self.joining.discard(body.member_id)
                elif refuse:
                    self.refused_sync = body.member_id
            note(body.member_id, "sync", answer["error_code"])
            return answer

        def commit(version, body, broker):
            with self.lock:
                refused = body.member_id in self.joining and self.refused_sync == body.member_id
                self.refused_commits += refused
            if not refused:
                return default[messages.OFFSET_COMMIT.key](version, body, broker)
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": illegal}
                                                for p in t.partitions]} for t in body.topics]}

        cluster.set_handler(messages.JOIN_GROUP, join)
        cluster.set_handler(messages.SYNC_GROUP, sync)
        cluster.set_handler(messages.OFFSET_COMMIT, commit)

    def of(self, member: str, request: str) -> list[tuple[float, int]]:
        with self.lock:
            return [(t, code) for t, m, r, code in self.events if m == member and r == request]


class Feed:
    """Values written to every partition, a few every 20 ms, from a thread, until stopped."""

    def __init__(self, kit, cluster):
        self.kit, self.cluster = kit, cluster
        self.written: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                values = [b"feed-p%d-%d" % (p, n + i) for i in range(3)]
                self.kit.mock_produce(self.cluster, "t", p, values)
                self.written.update(values)
            n += 3
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_a_commit_refused_while_a_cooperative_member_joins_again_leaves_its_claims(kit):
    """a holds every partition and handles a steady feed; b joins. a's SyncGroup of the new
    generation is held, then refused (REBALANCE_IN_PROGRESS), and a commit a sent while it joined
    is answered ILLEGAL_GENERATION (the broker's group moved on) while a is still joining, its
    generation not yet replaced. The join under way decides whether a is still a member: it is,
    so its session goes on, it keeps the partitions it is not asked to give up, and nothing is
    handled twice (a session ended there would drop every claim with its marks uncommitted)."""
    handled = Handled()
    with MockCluster(n_brokers=1, topics={"t": PARTITIONS}) as cluster:
        script = GroupScript(cluster)
        feed = Feed(kit, cluster)
        a = started(cluster, handled, "a")
        b = None
        try:
            kit.wait_for(lambda: len(claimed(a)) == PARTITIONS and handled.values(), timeout=30,
                         what="a handling every partition")
            session = a.session
            script.refuse_sync_of = a.coordinator.member_id
            b = started(cluster, handled, "b")
            kit.wait_for(lambda: len(claimed(a)) == 2 and len(claimed(b)) == 2, timeout=30,
                         what="a and b holding 2 partitions each")
            assert any(code for _, code in script.of(a.coordinator.member_id, "sync")), "a's SyncGroup was refused"
            feed.stop()
            kit.wait_for(lambda: handled.values() == feed.written, timeout=30, what="every value handled")
            assert a.session is session, f"a's session went on ({a.last_end_reason})"
            assert a.revoked == 2
        finally:
            feed.stop()
            if b is not None:
                b.stop(30)
            a.stop(30)
    assert handled.twice() == {}, "every value handled once"


def test_a_member_that_gave_up_partitions_lets_the_others_have_their_assignment_before_it_joins_again(kit):
    """The leader a gives up 2 partitions as b joins; b's SyncGroup reaches the broker a little
    after a's (a broker answering waiting SyncGroups now and then, as tansu does once a second).
    a's join that lets the 2 partitions go to b waits `follow_up_grace`, so b's SyncGroup of the
    generation is answered with its assignment rather than refused by a new rebalance; then b
    has its 2 partitions after the next round, and no SyncGroup was refused."""
    from raykafka.actors.group_member_state import follow_up_grace

    handled = Handled()
    with MockCluster(n_brokers=1, topics={"t": PARTITIONS}) as cluster:
        script = GroupScript(cluster, follower_sync_delay=0.5)
        a = started(cluster, handled, "a")
        b = None
        try:
            kit.wait_for(lambda: len(claimed(a)) == PARTITIONS, timeout=30, what="a holding every partition")
            b = started(cluster, handled, "b")
            kit.wait_for(lambda: len(claimed(a)) == 2 and len(claimed(b)) == 2, timeout=30,
                         what="a and b holding 2 partitions each")
            refused = [(m, code) for _, m, r, code in script.events if r == "sync" and code]
            assert refused == [], f"SyncGroups refused by a rebalance that came too soon: {refused}"
            a_id = a.coordinator.member_id
            syncs, joins = script.of(a_id, "sync"), script.of(a_id, "join")
            revoking_sync = syncs[-2][0]  # the one that left out 2 partitions; the last gave none back
            follow_up = min(t for t, _ in joins if t > revoking_sync)
            # the JoinGroup is noted when answered: the broker holds it until b has joined too
            assert follow_up - revoking_sync >= follow_up_grace(a.config), "a joined again at once"
        finally:
            if b is not None:
                b.stop(30)
            a.stop(30)


def test_a_member_joins_twice_for_a_partition_to_move_even_when_its_commits_are_slow(kit):
    """b joins a's group: a joins the round b started, gives up 2 partitions, and joins the
    round that gives them to b; no more (each round a member joins beyond these is a new
    generation, which on tansu costs every member half a `session.timeout.ms`). Commits are
    answered more slowly than a's heartbeat interval, so a joins without waiting for its commit
    before each join, while a feed keeps it marking; still nothing is handled twice (what a
    handled of the partitions it gives up is committed as it gives them up)."""
    from raykafka.wire import messages

    handled = Handled()
    with MockCluster(n_brokers=1, topics={"t": PARTITIONS}) as cluster:
        script = GroupScript(cluster)
        feed = Feed(kit, cluster)
        cluster.delay(messages.OFFSET_COMMIT, 0.4)
        a = started(cluster, handled, "a")
        b = None
        try:
            kit.wait_for(lambda: len(claimed(a)) == PARTITIONS and handled.values(), timeout=30,
                         what="a handling every partition")
            a_id = a.coordinator.member_id
            joins_before = len(script.of(a_id, "join"))
            b = started(cluster, handled, "b")
            kit.wait_for(lambda: len(claimed(a)) == 2 and len(claimed(b)) == 2, timeout=30,
                         what="a and b holding 2 partitions each")
            feed.stop()
            kit.wait_for(lambda: handled.values() == feed.written, timeout=30, what="every value handled")
            assert len(script.of(a_id, "join")) - joins_before == 2, script.of(a_id, "join")
        finally:
            feed.stop()
            if b is not None:
                b.stop(30)
            a.stop(30)
    assert handled.twice() == {}, "every value handled once"
