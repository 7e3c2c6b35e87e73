"""Fault-injection tests of cluster mode (issue 16), in the style of Jepsen's Kafka tests:
idempotent acks=all producers, transactional producers and consumer groups run while a fault
hits the cluster (a zombie leader, a zombie controller, a broker back with an emptied disk, a
broker cut from PostgreSQL, a network partition, leaders killed under transactions, a rolling
restart); after the fault heals, a final drain of every partition is checked against what the
clients saw (tests/cluster/checker.py), and the counts are printed.

The 3-broker tests share one cluster (started once for the module, brought back to health
before each test: every broker running, nothing cut or partitioned, every replica in sync);
each test uses topics of its own. The zombie controller runs on a cluster of 5.
FJORD_SOAK=1 (`make soak`) repeats each fault more times."""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Iterable

import psycopg
import pytest
from broker_process import FAST_GROUP_OVERRIDES
from checker import READ_COMMITTED, READ_UNCOMMITTED, Send, check
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from harness import Cluster, MetadataView, assert_formed, wait_for
from kafka_requests import req
from postgres_database import skip_without_postgres
from workload import (
    GroupConsumers,
    IdempotentProducers,
    TransactionalProducers,
    committed_offsets,
    drain,
)

SOAK = bool(os.environ.get("FJORD_SOAK"))
ROUNDS = 5 if SOAK else 1  # how many times a test injects its fault
# How many acknowledgements a test waits for to see the producers make progress (more of
# them, and so longer runs, when soaking).
PROGRESS = 600 if SOAK else 200
OVERRIDES = (
    # Failure detection in seconds: a broker gone is fenced within 3 s of its last heartbeat,
    # and a follower that stopped fetching leaves the ISR after 2 s.
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=2000",
    # Fewer internal partitions for a restarted or emptied broker to catch up with.
    "offsets.topic.num.partitions=10",
    "transaction.state.log.num.partitions=10",
    *FAST_GROUP_OVERRIDES,
)
MANY = 10**9  # records or transactions per client: they run until the test has them finish
UNRESOLVED = 50  # records a producer has awaiting an answer at most
FIND_COORDINATOR_V = 4
LIST_TRANSACTIONS_V = 0

pytestmark = pytest.mark.timeout(1200 if SOAK else 300)


# -- the clusters ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    skip_without_postgres()
    cluster = Cluster(tmp_path_factory.mktemp("faults"), 3, OVERRIDES)
    cluster.start()
    try:
        assert_formed(cluster)
        cluster.wait_for_brokers()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(shared_cluster):
    """The shared 3-broker cluster, healthy; the clients a test tracked are stopped after it,
    and what the brokers printed last is in the test's output."""
    restore(shared_cluster)
    yield shared_cluster
    print(shared_cluster.logs(60))
    # The clients of this test (a failed test leaves them running): stopped now, before the
    # next test, rather than when the module's cluster closes.
    shared_cluster.abort_clients()


@pytest.fixture
def five_brokers(make_formed_cluster):
    cluster = make_formed_cluster(5, OVERRIDES)
    cluster.wait_for_brokers()
    return cluster


def restore(cluster: Cluster) -> None:
    """Undo whatever an earlier test left: partitions, store cuts, paused or stopped brokers;
    then wait until every broker is listed and every replica is in sync."""
    cluster.heal()
    for n in cluster.nodes:
        cluster.heal_store(n)
        if not cluster.running(n):
            cluster.restart(n)
        elif n not in cluster.alive():
            cluster.resume(n)
    wait_for_full_isr(cluster)


def wait_for_full_isr(cluster: Cluster, timeout: float = 90) -> MetadataView:
    """Until every broker's Metadata lists every broker and every partition of every topic
    (the internal ones too) with a leader and all its replicas in sync. Every broker's: a
    zombie just resumed answers from the view it had when paused until it catches up."""
    seen: list[MetadataView | None] = [None]

    def healthy_from(node: int) -> MetadataView | None:
        view = seen[0] = cluster.metadata_from(node)
        if view is None or set(view.brokers) != set(cluster.nodes):
            return None
        for partitions in view.topics.values():
            for p in partitions.values():
                if p.error or p.leader not in cluster.nodes or set(p.isr) != set(p.replicas):
                    return None
        return view

    def healthy() -> MetadataView | None:
        views = [healthy_from(n) for n in cluster.nodes]
        return views[0] if all(views) else None

    return wait_for(healthy, timeout, "every replica in sync", lambda: seen[0])


def create_topic(cluster: Cluster, prefix: str, partitions: int = 3) -> str:
    """A new topic with 3 replicas and min.insync.replicas=2, once every replica is in sync.
    Through an admin client of its own, gone when this returns."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10_000})
    topic = NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
    del admin
    cluster.wait_for_leaders(name, min_isr=3)
    return name


def finish(producers: IdempotentProducers) -> list[Send]:
    """Have each producer send no more records and wait until every one it sent is answered;
    the history."""
    producers.records = 0  # read before each send: the producers leave their loops
    return producers.stop()


def progress(producers: IdempotentProducers, count: int = PROGRESS) -> None:
    """Until `count` more records are acknowledged than now."""
    producers.wait_for_acks(producers.acknowledged + count)


def isr_of(view: MetadataView | None, topic: str) -> dict[int, tuple[int, ...]]:
    return {i: p.isr for i, p in (view.topics.get(topic, {}) if view else {}).items()}


def listed(cluster: Cluster, asked: Iterable[int]) -> set[int]:
    """The brokers (unfenced ones) that Metadata from the first of `asked` to answer lists."""
    view = cluster.metadata(asked)
    return set(view.brokers) if view else set()


def led_by(view: MetadataView, topic: str, node: int) -> list[int]:
    return sorted(i for i, p in view.topics[topic].items() if p.leader == node)


def acked_on(sends: Iterable[Send], partitions: Iterable[int]) -> int:
    partitions = set(partitions)
    return sum(s.acknowledged and s.partition in partitions for s in sends)


# -- clients outside the workload ------------------------------------------------------------


class Writes:
    """Records written by one producer of their own, outside the workload: values
    "<name>-<seq>" in the checker's format, with acks=all and no retries (librdkafka only
    sends a record again, to the new leader, when a broker refused it unwritten, as with
    NOT_LEADER_OR_FOLLOWER), so that a broker's error reaches the test. Metadata is not
    refreshed on a timer: the producer goes on sending to the leader it knew until a request
    fails, which is how a client reaches a zombie."""

    def __init__(self, bootstrap: str, topic: str, name: str, config: dict | None = None):
        self.topic = topic
        self.name = name
        self.sends: list[Send] = []
        self.errors: dict[str, KafkaError] = {}
        self._seq = itertools.count()
        self._pending: dict[str, int] = {}
        self._producer: Producer | None = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "retries": 0,
                "linger.ms": 0,
                "topic.metadata.refresh.interval.ms": -1,
                "socket.timeout.ms": 10_000,
                "request.timeout.ms": 5_000,
                "message.timeout.ms": 30_000,
                **(config or {}),
            }
        )

    def _delivered(self, err, msg) -> None:
        value = msg.value().decode()
        self._pending.pop(value, None)
        self.sends.append(
            Send(value, msg.partition(), None if err else msg.offset(), err and str(err))
        )
        if err:
            self.errors[value] = err

    def produce(self, partition: int, count: int) -> None:
        """Queue `count` records for `partition` (sent at once, answered later)."""
        for _ in range(count):
            value = f"{self.name}-{next(self._seq)}"
            self._producer.produce(
                self.topic, value.encode(), partition=partition, on_delivery=self._delivered
            )
            self._pending[value] = partition
        self._producer.poll(0)

    def wait(self, timeout: float = 60) -> list[Send]:
        """Until every record queued has been answered; the history so far."""
        self._producer.flush(timeout)
        for value, partition in self._pending.items():
            self.sends.append(Send(value, partition, None, "no delivery report"))
        self._pending.clear()
        return list(self.sends)

    def error_codes(self) -> set[int]:
        return {e.code() for e in self.errors.values()}

    def abort(self) -> None:
        if self._producer is not None:
            self._producer.purge()
            self._producer.flush(0)
            self._producer = None


def warm(writes: Writes, partition: int) -> None:
    """One record acknowledged, so that the producer holds metadata and a connection to the
    partition's leader."""
    writes.produce(partition, 1)
    sends = writes.wait()
    assert sends[-1].acknowledged, f"a first write to {writes.topic}-{partition} failed: {sends}"


# -- requests to one broker ---------------------------------------------------------------------


def coordinator(cluster: Cluster, key: str, key_type: int) -> int:
    """The broker FindCoordinator names for a group (key_type 0) or a transactional id (1)."""
    request = req(
        10, FIND_COORDINATOR_V, "FindCoordinatorRequest", key_type=key_type, coordinator_keys=(key,)
    )

    def found() -> int | None:
        for n in cluster.alive():
            response = cluster.ask(n, request)
            if response is not None:
                (c,) = response.coordinators
                if c.error_code == 0 and c.node_id in cluster.alive():
                    return int(c.node_id)
        return None

    return wait_for(found, 60, f"the coordinator of {key!r}")


def transactional_ids(cluster: Cluster, prefix: str) -> list[str]:
    """The transactional ids starting with `prefix` that the brokers' coordinators know."""
    request = req(
        66,
        LIST_TRANSACTIONS_V,
        "ListTransactionsRequest",
        state_filters=(),
        producer_id_filters=(),
    )
    ids = set()
    for n in cluster.alive():
        response = cluster.ask(n, request)
        if response is not None:
            ids |= {
                t.transactional_id
                for t in response.transaction_states
                if t.transactional_id.startswith(prefix)
            }
    return sorted(ids)


# -- the tests ----------------------------------------------------------------------------------


def test_zombie_leader_acknowledges_nothing_that_is_lost(cluster):
    """SIGSTOP the leader of a partition past the session timeout while idempotent acks=all
    producers run: it is fenced and leadership moves. Then a client that still takes it for
    the leader sends it writes while it is paused, which it finds in its socket as it
    continues, before or after it learns what changed: whatever it acknowledges must
    survive. The producers' history, those writes and a consumer's reads check out after it
    rejoined the ISR."""
    topic = create_topic(cluster, "zombie-leader")
    group = f"{topic}-group"
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    reader = cluster.track(
        GroupConsumers(cluster.bootstrap, topic, group, READ_UNCOMMITTED, members=1)
    ).start()
    zombie_sends: list[Send] = []
    for round_ in range(1, ROUNDS + 1):
        progress(producers)
        before = cluster.wait_for_leaders(topic, min_isr=3)
        victim = before[0].leader
        writes = cluster.track(Writes(cluster.bootstrap, topic, f"z{round_}"))
        warm(writes, 0)
        cluster.pause(victim)
        after = cluster.wait_for_leaders(topic, min_isr=2)
        assert after[0].leader != victim and after[0].leader_epoch > before[0].leader_epoch
        assert victim not in after[0].isr
        progress(producers)  # the others go on without it
        # Sent to the paused broker on the connection the producer has to it: waiting in its
        # socket when it continues.
        writes.produce(0, 20)
        cluster.resume(victim)
        zombie_sends += writes.wait()
        writes.abort()
        wait_for(
            lambda victim=victim: (
                (view := cluster.metadata_from(victim)) is not None
                and view.topics[topic][0].leader != victim
            ),
            30,
            f"broker {victim} to learn it no longer leads {topic}-0",
        )
        cluster.wait_for_leaders(topic, min_isr=3)  # back in sync
        progress(producers)
    sends = finish(producers)
    everything = drain(cluster.bootstrap, topic)
    reader.wait_for_reads(sum(len(r) for r in everything.values()))
    history = reader.stop()
    result = check(
        drain=everything,
        sends=sends + zombie_sends,
        reads=history.reads,
        commits=history.commits,
        final_offsets=committed_offsets(cluster.bootstrap, group, topic, 3),
    )
    print(result.format())
    print(f"zombie writes: {len(zombie_sends)}, acknowledged {acked_on(zombie_sends, [0])}")
    result.assert_valid()
    assert not producers.fatal_errors


def test_zombie_controller_changes_nothing(five_brokers):
    """Five brokers. SIGSTOP the controller past its lease: another takes over, elects leaders
    for the partitions the paused one led, and handles a broker killed and restarted
    meanwhile. Resumed, the old controller still believes it controls, but its decisions
    (conditional on its controller epoch) change nothing: every broker names the new
    controller, no leader epoch goes back, the cluster converges with every replica in sync,
    and the producers' history is valid."""
    cluster = five_brokers
    topic = create_topic(cluster, "zombie-controller", partitions=5)
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 5, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    # What each broker's Metadata said last: the leader epoch of each partition, and whether
    # it named the new controller yet. Neither may go back.
    epochs: dict[tuple[int, int], int] = {}
    named_new: set[int] = set()

    def observe(new: int) -> list[MetadataView | None]:
        views = [cluster.metadata_from(n) for n in cluster.alive()]
        for view in filter(None, views):
            for i, p in view.topics.get(topic, {}).items():
                last = epochs.get((view.answered_by, i), -1)
                assert p.leader_epoch >= last, (
                    f"broker {view.answered_by} says {topic}-{i} is at leader epoch "
                    f"{p.leader_epoch} after saying {last}"
                )
                epochs[view.answered_by, i] = p.leader_epoch
            if view.controller == new:
                named_new.add(view.answered_by)
            assert view.answered_by not in named_new or view.controller == new, (
                f"broker {view.answered_by} names controller {view.controller} after {new}"
            )
        return views

    for _ in range(ROUNDS):
        progress(producers)
        old = cluster.controller()
        cluster.pause(old)
        new = cluster.controller(excluding=[old])
        named_new.clear()
        observe(new)
        cluster.wait_for_leaders(topic, min_isr=2)
        progress(producers)
        # Decisions for the new controller alone: a broker gone (some partitions are left
        # with one replica in sync, it and the paused one being two of their three) and back
        # (unfenced once out of every ISR, in sync again once caught up).
        other = next(n for n in cluster.alive() if n != new)
        cluster.kill(other)
        cluster.wait_for_leaders(topic)
        cluster.restart(other)
        cluster.wait_for_leaders(topic, min_isr=2)
        progress(producers)
        observe(new)
        cluster.resume(old)

        def converged(new=new) -> bool:
            views = observe(new)
            return all(
                view is not None
                and view.controller == new
                and set(view.brokers) == set(cluster.nodes)
                and all(set(p.isr) == set(p.replicas) for p in view.topics[topic].values())
                for view in views
            )

        wait_for(converged, 90, f"every broker to name controller {new}, all replicas in sync")
        wait_for_full_isr(cluster)
        progress(producers)
        observe(new)
        assert cluster.controller() == new
    sends = finish(producers)
    result = check(drain=drain(cluster.bootstrap, topic), sends=sends)
    print(result.format())
    result.assert_valid()
    assert not producers.fatal_errors


def test_broker_paused_inside_a_metadata_transaction_is_fenced(cluster):
    """A zombie paused at the worst moment: inside a transaction of its own in PostgreSQL
    that has written (SIGSTOP as soon as one of its writes shows in pg_stat_activity, so
    that it cannot send the COMMIT). Past its session timeout it must be fenced and its
    partitions led elsewhere all the same: liveness must not rest on the zombie. (PostgreSQL
    ends the paused session after the broker's session timeout: its row locks would hold
    back every other broker's metadata writes.)"""
    topic = create_topic(cluster, "paused-in-txn")
    controller = cluster.controller()
    view = cluster.wait_for_leaders(topic, min_isr=3)
    victim = next(p.leader for p in view.values() if p.leader != controller)
    others = [n for n in cluster.nodes if n != victim]
    pause_inside_a_transaction(cluster, victim)
    sessions = cluster.store_sessions(victim)
    print(f"broker {victim} paused with sessions {sessions}")
    wait_for(
        lambda: (seen := listed(cluster, others)) and victim not in seen,
        20,
        f"broker {victim}, paused inside a transaction ({sessions}), to be fenced",
    )
    cluster.wait_for_leaders(topic, min_isr=2, timeout=20)


def pause_inside_a_transaction(cluster: Cluster, node: int, timeout: float = 60) -> None:
    """SIGSTOP broker `node` between one of its metadata writes and its COMMIT: watch its
    sessions in pg_stat_activity and stop it the moment one runs an UPDATE (it then finds
    the answer but cannot send the COMMIT); retry until one is caught so."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            ports = sorted(cluster.proxies[node].upstream_ports())
            writing = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE client_port = ANY(%s) "
                "AND state IN ('active', 'idle in transaction') AND query LIKE 'UPDATE %%'",
                (ports,),
            ).fetchone()
            if not writing:
                continue
            cluster.pause(node)
            stuck = [s for s in cluster.store_sessions(node) if s.writing]
            if any(s.state == "idle in transaction" for s in stuck):
                return
            cluster.resume(node)
    pytest.fail(f"broker {node} was never caught inside a metadata transaction")


def test_broker_back_with_an_emptied_log_dir_catches_up_before_rejoining(cluster):
    """Kill a broker, empty its log dir and start it again while acks=all producers run
    (replication factor 3, min.insync.replicas=2): it is out of the ISR when it comes back
    and in it again later. Then the other two are killed, leaving it the only replica: a
    drain from it alone holds every acknowledged record, which it could not if it had
    rejoined the ISR before catching up."""
    topic = create_topic(cluster, "emptied")
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    for _ in range(ROUNDS):
        progress(producers)
        victim = cluster.leader(topic, 0)
        cluster.kill(victim)
        view = cluster.wait_for_leaders(topic, min_isr=2)
        assert all(victim not in p.isr for p in view.values()), view
        progress(producers)
        cluster.wipe(victim)
        others = [n for n in cluster.nodes if n != victim]
        if cluster.network is not None:
            # Back, but unable to reach the leaders for a while: it is unfenced (it is in no
            # ISR) and listed again, and stays out of every ISR as long as it cannot catch up.
            cluster.isolate(victim)
            cluster.restart(victim)
            wait_for(
                lambda others=others, victim=victim: victim in listed(cluster, others),
                30,
                f"broker {victim} to be unfenced",
            )
            seen = isr_of(cluster.metadata(others), topic)
            assert seen and all(victim not in isr for isr in seen.values()), (
                f"broker {victim}, back with an emptied log dir, is in sync at once: {seen}"
            )
            cluster.heal()
        else:
            cluster.restart(victim)
        cluster.wait_for_leaders(topic, min_isr=3)
        progress(producers)
    sends = finish(producers)
    wait_for_full_isr(cluster)
    for n in [n for n in cluster.nodes if n != victim]:
        cluster.kill(n)
        cluster.wait_for_leaders(topic)
    view = cluster.metadata([victim])
    assert all(p.leader == victim and p.isr == (victim,) for p in view.topics[topic].values())
    result = check(drain=drain(cluster.bootstrap, topic), sends=sends)
    print(result.format())
    result.assert_valid()
    assert not producers.fatal_errors


def test_leader_cut_from_postgres_is_fenced_and_rejoins(cluster):
    """Cut the leader of a partition from PostgreSQL: its session ends, so it is fenced at
    once and leadership moves, which the store can no longer tell it; a client that takes it
    for the leader gets no acknowledgement of what would be lost, and is soon told by it of the
    new leader, which it hears of from the other brokers. Healed, it rejoins the ISR; nothing
    acknowledged is lost."""
    topic = create_topic(cluster, "store-cut")
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    stale_sends: list[Send] = []
    for round_ in range(1, ROUNDS + 1):
        progress(producers)
        before = cluster.wait_for_leaders(topic, min_isr=3)
        victim = before[0].leader
        writes = cluster.track(Writes(cluster.bootstrap, topic, f"c{round_}"))
        warm(writes, 0)
        cluster.cut_from_store(victim)
        others = [n for n in cluster.nodes if n != victim]
        wait_for(
            lambda others=others: listed(cluster, others) == set(others),
            30,
            f"the others to fence broker {victim}",
        )
        after = cluster.wait_for_leaders(topic, min_isr=2, excluding=[victim])
        assert after[0].leader_epoch > before[0].leader_epoch
        # librdkafka asks for metadata on the connection it used last: for a producer whose
        # records wait on the victim, the victim's. Unless the victim names the new leader,
        # that producer waits until the cut heals.
        wait_for(
            lambda victim=victim, after=after: (
                (view := cluster.metadata_from(victim)) is not None
                and view.topics[topic][0].leader_epoch >= after[0].leader_epoch
                and view.topics[topic][0].leader != victim
            ),
            30,
            f"broker {victim}, cut off, to name the new leader of {topic}-0",
        )
        progress(producers)
        writes.produce(0, 20)  # to the broker cut off, on the producer's view from before
        stale_sends += writes.wait()
        writes.abort()
        cluster.heal_store(victim)
        wait_for_full_isr(cluster)
        progress(producers)
    sends = finish(producers)
    result = check(drain=drain(cluster.bootstrap, topic), sends=sends + stale_sends)
    print(result.format())
    print(
        f"writes to the cut-off leader: {len(stale_sends)}, acknowledged "
        f"{acked_on(stale_sends, [0])}"
    )
    result.assert_valid()
    assert not producers.fatal_errors


def test_leader_partitioned_from_its_followers_acknowledges_nothing(cluster):
    """A network partition isolates a leader from the other brokers, not from PostgreSQL: it
    keeps its leadership (its lease is renewed) but its followers cannot fetch, so after
    replica.lag.time.max.ms its ISR shrinks to itself, below min.insync.replicas=2, and its
    acks=all writes fail with NOT_ENOUGH_REPLICAS rather than being acknowledged. Partitions
    led on the other side go on. Healed, nothing acknowledged is lost."""
    if cluster.network is None:
        pytest.skip("network partitions need network namespaces (root, ip and nft)")
    topic = create_topic(cluster, "partitioned")
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    probe_sends: list[Send] = []
    for round_ in range(1, ROUNDS + 1):
        progress(producers)
        view = cluster.wait_for_leaders(topic, min_isr=3)
        victim = view[0].leader
        stuck = led_by(cluster.metadata(), topic, victim)
        going_on = [i for i in range(3) if i not in stuck]
        cluster.isolate(victim)

        def shrunk(victim=victim, stuck=stuck) -> bool:
            view = cluster.metadata_from(victim)
            return view is not None and all(
                view.topics[topic][i].leader == victim and view.topics[topic][i].isr == (victim,)
                for i in stuck
            )

        wait_for(shrunk, 60, f"broker {victim} to shrink the ISR of {topic}-{stuck} to itself")
        acked_before = acked_on(producers.sends, stuck)
        probe = cluster.track(Writes(cluster.brokers[victim].bootstrap, topic, f"n{round_}"))
        for i in stuck:
            probe.produce(i, 5)
        probe_sends += probe.wait()
        probe.abort()
        assert probe.error_codes() == {KafkaError.NOT_ENOUGH_REPLICAS}, probe.sends
        if going_on:
            # On the other side, the leaders drop the isolated broker from their ISRs and
            # go on acknowledging.
            others = [n for n in cluster.nodes if n != victim]
            wait_for(
                lambda others=others, going_on=going_on, victim=victim: (
                    (view := cluster.metadata(others)) is not None
                    and all(victim not in view.topics[topic][i].isr for i in going_on)
                ),
                60,
                f"the ISRs of {topic}-{going_on} to shrink",
            )
            writes = cluster.track(Writes(cluster.bootstrap, topic, f"g{round_}"))
            for i in going_on:
                writes.produce(i, 5)
            probe_sends += writes.wait()
            writes.abort()
            assert not writes.errors, writes.sends
        still = cluster.metadata_from(victim)
        assert all(still.topics[topic][i].isr == (victim,) for i in stuck), still
        assert acked_on(producers.sends, stuck) == acked_before, (
            f"writes to {topic}-{stuck} acknowledged with the ISR below min.insync.replicas"
        )
        cluster.heal()
        wait_for_full_isr(cluster)
        progress(producers)
    sends = finish(producers)
    result = check(drain=drain(cluster.bootstrap, topic), sends=sends + probe_sends)
    print(result.format())
    result.assert_valid()
    assert not producers.fatal_errors


def test_transactions_through_leader_and_coordinator_failovers(cluster):
    """Transactional producers (committing and aborting in turn) and read_committed consumer
    group members that commit offsets run while the leader of a data partition, then the
    transaction coordinator, then the group coordinator are SIGKILLed and restarted (each a
    broker not killed before in the round): read_committed never sees aborted data,
    committed transactions are all or nothing, committed group offsets survive."""
    topic = create_topic(cluster, "txn-failover")
    group = f"{topic}-group"
    txns = cluster.track(
        TransactionalProducers(cluster.bootstrap, topic, 3, producers=2, transactions=MANY)
    ).start()
    consumers = cluster.track(
        GroupConsumers(cluster.bootstrap, topic, group, READ_COMMITTED, commit_every=20)
    ).start()
    txns.wait_for_transactions(4)
    for _ in range(ROUNDS):
        killed: set[int] = set()
        for role in ("data", "transaction", "group"):
            if role == "data":
                victim = cluster.leader(topic, 0)
            elif role == "transaction":
                ids = wait_for(lambda: transactional_ids(cluster, topic), 60, "transactional ids")
                victim = coordinator(cluster, ids[0], 1)
            else:
                victim = coordinator(cluster, group, 0)
            if victim in killed:
                continue
            killed.add(victim)
            print(f"killing broker {victim}, the {role} leader")
            done, read = len(txns.txns), consumers.distinct_reads
            cluster.kill(victim)
            cluster.wait_for_leaders(topic, min_isr=2)
            txns.wait_for_transactions(done + 4)
            consumers.wait_for_reads(read + 8)
            cluster.restart(victim)
            wait_for_full_isr(cluster)
    txns.wait_for_transactions(len(txns.txns) + 4)
    txns.stopping.set()
    transactions = txns.stop()
    everything = drain(cluster.bootstrap, topic)
    committed = drain(cluster.bootstrap, topic, READ_COMMITTED)
    consumers.wait_for_reads(sum(len(r) for r in committed.values()))
    history = consumers.stop()
    result = check(
        drain=everything,
        committed_drain=committed,
        txns=transactions,
        reads=history.reads,
        commits=history.commits,
        final_offsets=committed_offsets(cluster.bootstrap, group, topic, 3),
    )
    print(result.format())
    result.assert_valid()
    assert result.counts["committed"] >= 1 and result.counts["aborted"] >= 1
    assert result.counts["offset_commits"] > 0
    assert not txns.fatal_errors


def test_rolling_restart_with_controlled_shutdown_keeps_acknowledging(cluster):
    """Each broker in turn is stopped with SIGTERM (controlled shutdown: leadership moves
    first) and started again, the next one only once every replica is in sync again, while
    idempotent acks=all producers run: writes are acknowledged while each broker is down,
    and nothing is lost."""
    topic = create_topic(cluster, "rolling")
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, records=MANY, max_unresolved=UNRESOLVED)
    ).start()
    during_downtime: dict[int, int] = {}
    for _ in range(ROUNDS):
        for n in cluster.nodes:
            progress(producers)
            assert cluster.stop(n) == 0, f"broker {n} did not shut down cleanly"
            stopped_at = producers.acknowledged
            # Beyond the records unanswered when it stopped: acknowledgements of records
            # sent while it is down.
            producers.wait_for_acks(stopped_at + producers.producers * UNRESOLVED + PROGRESS)
            during_downtime[n] = producers.acknowledged - stopped_at
            cluster.restart(n)
            wait_for_full_isr(cluster)
    sends = finish(producers)
    result = check(drain=drain(cluster.bootstrap, topic), sends=sends)
    print(result.format())
    print(f"acknowledged while each broker was down: {during_downtime}")
    result.assert_valid()
    assert not producers.fatal_errors
