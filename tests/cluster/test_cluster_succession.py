"""What a broker tells a client whose partition leader has just died."""

from __future__ import annotations

import socket
import uuid

from confluent_kafka.admin import NewTopic


def dropped(connection: socket.socket) -> bool:
    """Once the peer's end closed: an end of stream, or a reset."""
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_follower_asked_the_moment_its_leader_died_names_the_successor(make_formed_cluster):
    """A client that loses its connection to a leader asks another broker for metadata that
    same moment, and librdkafka, told "no leader" (when nothing of the partition was in
    flight), looks again only a second later. The follower lost its own connection to the
    leader too: it holds the answer until the controller elected the successor."""
    cluster = make_formed_cluster(3, network="loopback")
    controller = cluster.controller()
    victim, *followers = sorted({1, 2, 3} - {controller}) + [controller]
    topic = f"succession-{uuid.uuid4().hex[:8]}"
    created = cluster.admin().create_topics(
        [NewTopic(topic, 1, replica_assignment=[[victim, *followers]])], operation_timeout=30
    )
    created[topic].result(timeout=60)
    assert cluster.wait_for_leaders(topic, min_isr=3)[0].leader == victim

    host, _, port = cluster.brokers[victim].bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as client_side:
        cluster.kill(victim)
        assert dropped(client_side)  # as the client sees it

    view = cluster.metadata_from(followers[0], timeout=30)
    [partition] = view.topics[topic].values()
    assert partition.error == 0
    assert partition.leader in followers
