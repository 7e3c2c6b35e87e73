"""Replication of a topic kept in an old message format (message.format.version before 0.11,
seed 004): its entries carry no leader epochs, so a follower has nothing to tell a divergence
by. As Kafka's followers do for such logs, a broker that begins to follow truncates to its high
watermark first; and followers keep the leader's entries byte for byte, append time included."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer
from harness import FAST_FAILOVER_OVERRIDES, Cluster
from workload import drain

# Followers cut off from their leader for a moment stay in its ISR.
OVERRIDES = (*FAST_FAILOVER_OVERRIDES, "replica.lag.time.max.ms=60000")


def produce(cluster: Cluster, topic: str, values: list[str], acks: str) -> None:
    """Each value written with `acks`, every one acknowledged."""
    failed: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": acks,
            "enable.idempotence": False,  # magic 1 has no producer ids
            "linger.ms": 5,
        }
    )
    for value in values:
        producer.produce(
            topic, value.encode(), partition=0, on_delivery=lambda e, _: e and failed.append(e)
        )
    assert producer.flush(60) == 0 and not failed, failed


def stored(log_dir: Path, topic: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((log_dir / f"{topic}-0").glob("*.log")))


def test_a_former_leaders_unreplicated_tail_goes_and_replicas_match_byte_for_byte(
    make_formed_cluster, netns
):
    cluster = make_formed_cluster(3, OVERRIDES, "netns")
    cluster.wait_for_brokers()
    topic = f"old-format-{uuid.uuid4().hex[:8]}"
    configs = {
        "message.format.version": "0.10.2",
        "message.timestamp.type": "LogAppendTime",
        "min.insync.replicas": "2",
    }
    cluster.create_topic(topic, 1, 3, configs)
    cluster.wait_for_leaders(topic, min_isr=3)
    before = [f"before-{i}" for i in range(300)]
    produce(cluster, topic, before, acks="all")

    # A tail only the leader has: cut off from its followers (not from the test or from
    # PostgreSQL), it acknowledges with acks=1 what they cannot fetch; then it dies.
    leader = cluster.leader(topic, 0)
    followers = [n for n in cluster.nodes if n != leader]
    cluster.isolate(leader)
    produce(cluster, topic, [f"lost-{i}" for i in range(50)], acks="1")
    cluster.kill(leader)
    cluster.heal()
    cluster.wait_for_leaders(topic, min_isr=2)
    after = [f"after-{i}" for i in range(300)]
    produce(cluster, topic, after, acks="all")

    cluster.restart(leader)
    cluster.wait_for_leaders(topic, min_isr=3)

    assert list(drain(cluster.bootstrap, topic)[0].values()) == before + after
    logs = {n: stored(cluster.brokers[n].log_dir, topic) for n in cluster.nodes}
    assert logs[leader] == logs[followers[0]] == logs[followers[1]]
