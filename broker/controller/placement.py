"""Where new partitions' replicas go: placed by the controller, or named by hand.

Kafka's StripedReplicaPlacer without racks, and the checks of its
ReplicationControlManager.validateManualPartitionAssignment, shared by CreateTopics,
CreatePartitions and AlterPartitionReassignments.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from broker.metadata.cluster import PartitionRegistration


class PlacementError(ValueError):
    """The replicas cannot be placed as asked (too few usable brokers, as they are now)."""


def place_replicas(
    brokers: list[int], partitions: int, replication_factor: int, first_partition: int = 0
) -> dict[int, PartitionRegistration]:
    """Replicas for new partitions, striped over the brokers (Kafka's assignment without
    racks): leaders round-robin from a random broker, each partition's followers the brokers
    after its leader, so leadership and load spread evenly. New partitions have every replica
    in sync: they are empty. PlacementError if the brokers are too few."""
    problem = replication_problem(replication_factor, len(brokers))
    if problem:
        raise PlacementError(problem)
    ordered = sorted(brokers)
    start = random.randrange(len(ordered))
    placed = {}
    for index in range(first_partition, first_partition + partitions):
        first = (start + index) % len(ordered)
        replicas = tuple(ordered[(first + i) % len(ordered)] for i in range(replication_factor))
        placed[index] = PartitionRegistration(replicas, replicas, replicas[0])
    return placed


def assigned_replicas(
    assignment: Sequence[Sequence[int]], usable: Collection[int], first_partition: int = 0
) -> dict[int, PartitionRegistration]:
    """New partitions whose replicas were named by hand: the usable ones are in sync (a
    fenced broker named rejoins once it has caught up), the first of them leads. Each
    must name one usable broker at least: PlacementError if one does not."""
    problem = unusable_assignment(assignment, usable, first_partition)
    if problem:
        raise PlacementError(problem)
    placed = {}
    for index, replicas in enumerate(assignment, start=first_partition):
        isr = tuple(r for r in replicas if r in usable)
        placed[index] = PartitionRegistration(tuple(replicas), isr, isr[0])
    return placed


def assignment_problem(
    replicas: Sequence[int], registered: Collection[int], replication: int | None = None
) -> str | None:
    """Why a hand-made replica list is invalid (INVALID_REPLICA_ASSIGNMENT), or None;
    `replication`, when given, is the count every partition of the topic must have."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for replica in sorted(replicas):
        if replica not in registered:
            return (
                f"The manual partition assignment includes broker {replica}, but no such "
                "broker is registered."
            )
        if replica == previous:
            return f"The manual partition assignment includes the broker {replica} more than once."
        previous = replica
    if replication is not None and len(replicas) != replication:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication} replica(s)."
        )
    return None


def unusable_assignment(
    assignment: Sequence[Sequence[int]], usable: Collection[int], first_partition: int = 0
) -> str | None:
    """Why hand-made replica lists cannot be created now (a partition with no usable
    replica has no one to lead it), or None."""
    for index, replicas in enumerate(assignment, start=first_partition):
        if not any(r in usable for r in replicas):
            return (
                f"All brokers specified in the manual partition assignment for partition "
                f"{index} are fenced or in controlled shutdown."
            )
    return None


def replication_problem(replication: int, usable: int) -> str | None:
    """Why the placer cannot place `replication` replicas on `usable` brokers
    (INVALID_REPLICATION_FACTOR), or None."""
    if replication <= 0:
        return "Replication factor must be larger than 0."
    if replication > usable:
        return (
            f"Unable to replicate the partition {replication} time(s): The target replication "
            f"factor of {replication} cannot be reached because only {usable} broker(s) are "
            "registered."
        )
    return None
