"""The controller's admin APIs in a cluster, over the Kafka protocol: ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments are the controller's (another
broker answers NOT_CONTROLLER, and Kafka's admin clients retry at the controller Metadata
names), and a reassignment moves a partition's data and then drops the old replica."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewPartitions
from harness import FAST_FAILOVER_OVERRIDES, wait_for
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from workload import IdempotentProducers, drain

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
PREFERRED = 0


# Longer than the requests' own timeouts (30 s): every request here must be answered.
ANSWER_TIMEOUT_S = 90


def ask(cluster, node: int, request):
    """`request` sent to broker `node` alone, and its response."""
    response = cluster.ask(node, request, timeout=ANSWER_TIMEOUT_S)
    assert response is not None, f"broker {node} did not answer {type(request).__name__}"
    return response


def elect_preferred(topic: str, partitions: list[int]):
    return req(
        ELECT_LEADERS,
        2,
        "ElectLeadersRequest",
        election_type=PREFERRED,
        topic_partitions=(
            req(ELECT_LEADERS, 2, "TopicPartitions", topic=topic, partitions=tuple(partitions)),
        ),
        timeout=ms(30000),
    )


def reassign(topic: str, partition: int, replicas: tuple[int, ...] | None):
    return req(
        ALTER_REASSIGNMENTS,
        0,
        "AlterPartitionReassignmentsRequest",
        timeout=ms(30000),
        topics=(
            req(
                ALTER_REASSIGNMENTS,
                0,
                "ReassignableTopic",
                name=topic,
                partitions=(
                    req(
                        ALTER_REASSIGNMENTS,
                        0,
                        "ReassignablePartition",
                        partition_index=partition,
                        replicas=replicas,
                    ),
                ),
            ),
        ),
    )


def ongoing(cluster, node: int) -> dict[tuple[str, int], tuple]:
    response = ask(
        cluster,
        node,
        req(
            LIST_REASSIGNMENTS,
            0,
            "ListPartitionReassignmentsRequest",
            timeout=ms(30000),
            topics=None,
        ),
    )
    assert response.error_code == ErrorCode.none
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    }


def test_preferred_leaders_come_back_through_the_controller(make_formed_cluster):
    cluster = make_formed_cluster(3, FAST_FAILOVER_OVERRIDES, network="loopback")
    cluster.wait_for_brokers()
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3)
    placed = cluster.wait_for_leaders(topic, min_isr=3)
    preferred = {p: state.replicas[0] for p, state in placed.items()}
    assert all(state.leader == preferred[p] for p, state in placed.items())
    # A controlled shutdown moves leadership off the broker; back, it leads nothing.
    victim = preferred[0]
    cluster.stop(victim)
    cluster.restart(victim)
    moved = cluster.wait_for_leaders(topic, min_isr=3)
    assert moved[0].leader != victim

    controller = cluster.controller()
    other = next(n for n in cluster.alive() if n != controller)
    refused = ask(cluster, other, elect_preferred(topic, [0, 1, 2]))
    assert refused.error_code == ErrorCode.not_controller

    response = ask(cluster, controller, elect_preferred(topic, [0, 1, 2]))
    assert response.error_code == ErrorCode.none
    results = {
        r.partition_id: r.error_code for r in response.replica_election_results[0].partition_result
    }
    assert results[0] == ErrorCode.none  # elected back
    assert all(
        results[p] == ErrorCode.election_not_needed for p in (1, 2) if preferred[p] != victim
    )
    wait_for(
        lambda: all(cluster.wait_for_leaders(topic)[p].leader == preferred[p] for p in range(3)),
        30,
        "every partition led by its preferred replica",
    )


def test_a_reassignment_moves_the_data_and_drops_the_old_replica(make_formed_cluster):
    cluster = make_formed_cluster(3, FAST_FAILOVER_OVERRIDES, network="loopback")
    cluster.wait_for_brokers()
    topic = f"move-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 2)
    before = cluster.wait_for_leaders(topic, min_isr=2)[0]
    producers = cluster.track(
        IdempotentProducers(cluster.bootstrap, topic, 1, producers=1, records=300)
    )
    producers.start()
    producers.wait_for_acks(300)
    sends = producers.stop()
    leaving = before.replicas[-1]
    arriving = next(n for n in (1, 2, 3) if n not in before.replicas)
    target = (*[r for r in before.replicas if r != leaving], arriving)

    controller = cluster.controller()
    other = next(n for n in cluster.alive() if n != controller)
    assert ask(cluster, other, reassign(topic, 0, target)).error_code == ErrorCode.not_controller
    response = ask(cluster, controller, reassign(topic, 0, target))
    assert response.error_code == ErrorCode.none
    assert response.responses[0].partitions[0].error_code == ErrorCode.none

    def done():
        state = cluster.wait_for_leaders(topic)[0]
        return not ongoing(cluster, controller) and tuple(state.replicas) == target and state

    after = wait_for(done, 60, f"{topic}-0 moved to {target}")
    assert set(after.isr) == set(target)
    # The old replica's copy is gone from its disk; the new one has every record.
    leaving_dir = cluster.brokers[leaving].log_dir
    wait_for(
        lambda: not any(leaving_dir.glob(f"{topic}-0*")) or None,
        30,
        f"{topic}-0 deleted from broker {leaving}",
    )
    everything = drain(cluster.bootstrap, topic)
    acknowledged = {s.value for s in sends if s.offset is not None}
    assert acknowledged <= {value for value in everything[0].values()}
    # Nothing to cancel once done.
    cancel = ask(cluster, controller, reassign(topic, 0, None))
    assert cancel.responses[0].partitions[0].error_code == ErrorCode.no_reassignment_in_progress


def test_new_partitions_go_where_named_or_onto_enough_usable_brokers(make_formed_cluster):
    cluster = make_formed_cluster(3, FAST_FAILOVER_OVERRIDES, network="loopback")
    cluster.wait_for_brokers()
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, min_isr=3)

    def grow(count: int, assignment: list[list[int]] | None = None) -> None:
        new = NewPartitions(topic, count, *([assignment] if assignment else []))
        cluster.admin().create_partitions([new], operation_timeout=30)[topic].result(timeout=60)

    def refused(count: int, assignment: list[list[int]] | None = None) -> int:
        with pytest.raises(KafkaException) as refusal:
            grow(count, assignment)
        return refusal.value.args[0].code()

    grow(2, [[3, 1, 2]])
    placed = cluster.wait_for_leaders(topic, min_isr=3, partitions=2)
    assert placed[1].replicas == (3, 1, 2) and placed[1].leader == 3
    assert refused(3, [[1, 2]]) == KafkaError.INVALID_REPLICA_ASSIGNMENT  # 2 replicas, not 3
    assert refused(3, [[1, 1, 2]]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert refused(3, [[1, 2, 9]]) == KafkaError.INVALID_REPLICA_ASSIGNMENT

    # With broker 2 gone, three replicas cannot be placed on the two left (rather than
    # placing one broker twice); named by hand, broker 2 is a replica out of the ISR.
    cluster.stop(2)
    wait_for(
        lambda: all(set(cluster.metadata_from(n).brokers) == {1, 3} for n in cluster.alive()),
        30,
        "every broker to see broker 2 gone",
    )
    assert refused(3) == KafkaError.INVALID_REPLICATION_FACTOR
    grow(3, [[2, 1, 3]])
    placed = cluster.wait_for_leaders(topic, min_isr=2, partitions=3)
    assert placed[2].replicas == (2, 1, 3) and placed[2].leader == 1
    assert set(placed[2].isr) == {1, 3}
    # Back, it catches up and joins the ISR of the partition created without it.
    cluster.restart(2)
    assert set(cluster.wait_for_leaders(topic, min_isr=3, partitions=3)[2].isr) == {1, 2, 3}
