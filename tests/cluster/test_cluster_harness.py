"""The cluster test harness itself: the PostgreSQL proxy cuts and heals, network namespaces
partition and are removed, a failed start leaves nothing behind, the fault operations act on
the broker processes, and the workload and checker agree with a real broker. Then the first
test of cluster mode (issue 16), which skips until the brokers form a cluster."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import psycopg
import pytest
from broker_process import FAST_GROUP_OVERRIDES, BrokerProcess
from checker import READ_COMMITTED, READ_UNCOMMITTED, check
from confluent_kafka.admin import AdminClient, NewTopic
from harness import (
    BROKER_PORT,
    FAST_FAILOVER_OVERRIDES,
    Cluster,
    Network,
    ProxyLoop,
    StoreProxy,
    wait_for,
)
from postgres_database import ADMIN_URL
from workload import (
    GroupConsumers,
    IdempotentProducers,
    TransactionalProducers,
    committed_offsets,
    drain,
)


@pytest.fixture
def proxy(postgres):
    loop = ProxyLoop()
    proxy = StoreProxy(loop)
    yield proxy
    proxy.close()
    loop.close()


@pytest.fixture(params=["netns", "loopback"])
def network(request) -> str:
    """Each way a Cluster places its brokers."""
    if request.param == "netns":
        request.getfixturevalue("netns")
    return request.param


def proxied_url(proxy: StoreProxy) -> str:
    return f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres"


def test_store_proxy_cuts_and_heals_connections(proxy):
    with psycopg.connect(proxied_url(proxy), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert proxy.connections == 1
        proxy.cut()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    assert proxy.connections == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(proxied_url(proxy), connect_timeout=10)
    proxy.heal()
    with psycopg.connect(proxied_url(proxy)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_store_proxy_blackhole_holds_new_connections_until_healed(proxy):
    proxy.cut(blackhole=True)
    answers = []

    def query() -> None:
        with psycopg.connect(proxied_url(proxy), connect_timeout=60) as conn:
            answers.append(conn.execute("SELECT 1").fetchone())

    thread = threading.Thread(target=query)
    thread.start()
    wait_for(lambda: proxy.held == 1, 30, "the connection to be held")
    assert not answers and proxy.connections == 0
    proxy.heal()
    thread.join(60)
    assert answers == [(1,)]


def connects(prefix: list[str], host: str, port: int) -> bool:
    """Whether a TCP connection from the namespace `prefix` runs in opens within 3 s (a
    partition drops packets, so an unreachable address never answers)."""
    script = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)"
    return subprocess.run([*prefix, sys.executable, "-c", script, host, str(port)]).returncode == 0


def brokers_listed(bootstrap: str) -> list[int]:
    """The brokers that Metadata from `bootstrap` lists, with a client gone once it returns
    (left running, it would go on connecting to an address the test then removes)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return sorted(admin.list_topics(timeout=30).brokers)


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_namespaces_partition_a_broker_and_are_removed(tmp_path, netns):
    network = Network([1, 2])
    broker = BrokerProcess(
        tmp_path / "kafka-logs",
        host=network.address(1),
        port=9092,
        prefix=network.exec_prefix(1),
    )
    try:
        assert network.namespace(1) in namespaces() and network.namespace(2) in namespaces()
        broker.start()
        assert brokers_listed(broker.bootstrap) == [1]
        assert connects(network.exec_prefix(2), network.address(1), 9092)
        network.partition([[1], [2]])
        assert not connects(network.exec_prefix(2), network.address(1), 9092)
        assert connects([], network.address(1), 9092), "the test reaches every broker"
        network.heal()
        assert connects(network.exec_prefix(2), network.address(1), 9092)
        assert broker.stop() == 0
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.kill()
        network.close()
    assert network.namespace(1) not in namespaces() and network.namespace(2) not in namespaces()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert network.bridge not in links and f"fv{network.tag}-" not in links


def test_a_failed_start_leaves_nothing_behind(tmp_path, postgres, network):
    cluster = Cluster(tmp_path, 2, ["no.such.setting=1"], network)
    with pytest.raises(RuntimeError, match="invalid configuration"):
        cluster.start()
    with psycopg.connect(ADMIN_URL) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cluster.database,))
        assert found.fetchone() is None
    for proxy in cluster.proxies.values():
        assert not connects([], proxy.host, proxy.port)
    if network == "netns":
        assert f"fjord-{cluster.network.tag}-" not in namespaces()


def test_fault_operations_act_on_the_broker_processes(make_cluster, network):
    """kill, restart, pause, resume, stop and wipe, on brokers that need not form a cluster:
    they only have to accept their settings."""
    cluster = make_cluster(3, network=network)
    assert cluster.alive() == [1, 2, 3]

    def answers(node: int) -> bool:
        return cluster.metadata_from(node, timeout=30) is not None

    cluster.kill(1)
    assert cluster.alive() == [2, 3]
    address = cluster.brokers[1].bootstrap
    cluster.restart(1)
    assert cluster.brokers[1].bootstrap == address and answers(1)
    with pytest.raises(RuntimeError, match="running"):
        cluster.restart(1)

    cluster.pause(2)
    assert cluster.alive() == [1, 3]
    assert cluster.process_state(2) == "T"
    cluster.resume(2)
    assert cluster.alive() == [1, 2, 3] and answers(2)

    with pytest.raises(RuntimeError, match="running"):
        cluster.wipe(3)
    cluster.pause(3)
    assert cluster.stop(3) == 0, "a paused broker is resumed to stop cleanly"
    log_dir = cluster.brokers[3].log_dir
    assert any(log_dir.iterdir())
    cluster.wipe(3)
    assert log_dir.is_dir() and not any(log_dir.iterdir())
    cluster.restart(3)
    assert cluster.alive() == [1, 2, 3] and answers(3)
    if network == "loopback":
        with pytest.raises(RuntimeError, match="netns"):
            cluster.isolate(1)


def test_partitions_and_store_cuts_on_a_cluster(make_cluster, netns):
    cluster = make_cluster(3, network="netns")
    net = cluster.network
    with pytest.raises(ValueError, match="exactly once"):
        cluster.partition([[1], [2]])
    cluster.isolate(1)
    assert not connects(net.exec_prefix(2), net.address(1), BROKER_PORT)
    assert not connects(net.exec_prefix(1), net.address(3), BROKER_PORT)
    assert connects(net.exec_prefix(2), net.address(3), BROKER_PORT)
    assert cluster.metadata_from(1, timeout=30), "the test reaches every broker"
    assert connects(net.exec_prefix(1), cluster.proxies[1].host, cluster.proxies[1].port)
    cluster.heal()
    assert connects(net.exec_prefix(2), net.address(1), BROKER_PORT)

    store = cluster.proxies[2]
    url = f"postgresql://postgres@{store.host}:{store.port}/{cluster.database}"
    cluster.cut_from_store(2)
    assert store.connections == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=10)
    cluster.heal_store(2)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.timeout(300)
def test_workload_and_checker_on_one_broker_killed_once(tmp_path):
    """The clients and the checker against a single broker (the embedded store), killed with
    SIGKILL and restarted in the middle: its acknowledged records survive, so the history of
    idempotent and transactional producers and of both isolation levels is valid."""
    broker = BrokerProcess(tmp_path / "kafka-logs", *FAST_GROUP_OVERRIDES).start()
    topic = f"workload-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-committed"
    producers = IdempotentProducers(broker.bootstrap, topic, 3, producers=2, records=600)
    txns = TransactionalProducers(broker.bootstrap, topic, 3, transactions=8)
    committed_reader = GroupConsumers(broker.bootstrap, topic, group, READ_COMMITTED)
    reader = GroupConsumers(broker.bootstrap, topic, f"{topic}-all", READ_UNCOMMITTED, 1)
    clients = (producers, txns, committed_reader, reader)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(60)
        for client in clients:
            client.start()
        producers.wait_for_acks(300)
        broker.kill()
        broker.start()
        sends, transactions = producers.stop(), txns.stop()
        everything = drain(broker.bootstrap, topic)
        committed = drain(broker.bootstrap, topic, READ_COMMITTED)
        reader.wait_for_reads(sum(len(r) for r in everything.values()))
        committed_reader.wait_for_reads(sum(len(r) for r in committed.values()))
        committed_history, history = committed_reader.stop(), reader.stop()
        result = check(
            drain=everything,
            committed_drain=committed,
            sends=sends,
            txns=transactions,
            reads=committed_history.reads + history.reads,
            commits=committed_history.commits,
            final_offsets=committed_offsets(broker.bootstrap, group, topic, 3),
        )
        print(result.format())
        result.assert_valid()
        # Idempotent producers retry through the restart: every one of their records lands.
        assert sum(s.offset is not None for s in sends) == 1200, result.format()
        assert result.counts["committed"] >= 1 and result.counts["aborted"] >= 1
        assert result.counts["offset_commits"] > 0
        assert not (producers.fatal_errors or txns.fatal_errors)
        assert broker.stop() == 0
    finally:
        for client in clients:
            client.abort()
        if broker.proc.poll() is None:
            broker.kill()


@pytest.mark.timeout(300)
def test_three_brokers_lose_nothing_when_a_leader_is_killed(make_formed_cluster):
    """Cluster mode's smoke test: replication factor 3, idempotent acks=all producers and a
    consumer group while the leader of a partition is SIGKILLed and later restarted."""
    cluster = make_formed_cluster(3, FAST_FAILOVER_OVERRIDES)
    cluster.wait_for_brokers()
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_leaders(topic, min_isr=3)
    group = f"{topic}-group"
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 3, producers=2, records=1500)
    ).start()
    consumers = cluster.track(
        GroupConsumers(cluster.bootstrap, topic, group, READ_UNCOMMITTED)
    ).start()
    producers.wait_for_acks(1000)
    victim = cluster.leader(topic, 0)
    cluster.kill(victim)
    cluster.wait_for_leaders(topic, min_isr=2)
    sends = producers.stop()
    cluster.restart(victim)
    cluster.wait_for_leaders(topic, min_isr=3)
    everything = drain(cluster.bootstrap, topic)
    consumers.wait_for_reads(sum(len(r) for r in everything.values()))
    history = consumers.stop()
    result = check(
        drain=everything,
        sends=sends,
        reads=history.reads,
        commits=history.commits,
        final_offsets=committed_offsets(cluster.bootstrap, group, topic, 3),
    )
    print(result.format())
    result.assert_valid()
    assert result.counts["acknowledged"] == 3000, result.format()
    assert not producers.fatal_errors
