"""The controller's decisions about partitions, as plain functions of the metadata image.

Kafka's PartitionChangeBuilder in small: brokers that are fenced or shutting down leave every
ISR they are in (unless they are its last member: that replica may be the only one holding
every acknowledged write, so it stays, and the partition waits for it, KIP-966's reasoning);
a partition whose leader left gets the first usable replica of its ISR in replica order. A
replica outside the ISR is elected only where unclean.leader.election.enable is true (its
default is false), and only when no in-sync replica is usable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Set
from dataclasses import replace

from broker.metadata.cluster import NO_LEADER, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata

PartitionChange = tuple[str, int, int, PartitionRegistration]  # topic, index, expected epoch, new


def partition_changes(
    image: MetadataImage,
    unclean_allowed: Callable[[TopicMetadata], bool] = lambda _: False,
    gone: Set[int] = frozenset(),
) -> Iterator[PartitionChange]:
    """The changes that bring every partition in line with which brokers are usable (not
    those `gone`, about to be fenced); `unclean_allowed(topic)` is its
    unclean.leader.election.enable."""
    usable = image.usable_brokers() - gone
    for topic in image.topics():
        unclean: bool | None = None  # looked up for a topic with a partition left leaderless
        for index, reg in image.registrations(topic.name).items():
            new = changed_registration(reg, usable)
            if (new or reg).offline:
                unclean = unclean_allowed(topic) if unclean is None else unclean
                if unclean:
                    new = unclean_election(reg, usable) or new
            if new is not None:
                yield topic.name, index, reg.partition_epoch, new


def changed_registration(
    reg: PartitionRegistration, usable: set[int]
) -> PartitionRegistration | None:
    isr = tuple(r for r in reg.isr if r in usable) or reg.isr[-1:]
    if reg.leader in usable and reg.leader in isr:
        return reg.with_isr(isr) if isr != reg.isr else None
    leader = next((r for r in reg.replicas if r in isr and r in usable), NO_LEADER)
    if leader == reg.leader:
        return reg.with_isr(isr) if isr != reg.isr else None
    return reg.with_leader(leader, isr)


def preferred_leader_changes(
    image: MetadataImage, exclude: list[PartitionChange] = ()
) -> list[PartitionChange]:
    """Leadership back to each partition's preferred replica where it is usable and in sync
    (auto.leader.rebalance.enable); partitions in `exclude` are already being changed."""
    usable = image.usable_brokers()
    changing = {(t, i) for t, i, _, _ in exclude}
    return [
        (topic.name, index, reg.partition_epoch, reg.with_leader(reg.preferred_leader, reg.isr))
        for topic in image.topics()
        for index, reg in image.registrations(topic.name).items()
        if (topic.name, index) not in changing and preferred_election(reg, usable) is None
    ]


def preferred_election(reg: PartitionRegistration, usable: set[int]) -> str | None:
    """Why the preferred replica cannot take leadership (ELECTION_NOT_NEEDED's and
    PREFERRED_LEADER_NOT_AVAILABLE's reasons), or None when it can."""
    if reg.leader == reg.preferred_leader:
        return "not needed"
    if reg.preferred_leader not in usable or reg.preferred_leader not in reg.isr:
        return "not available"
    return None


def unclean_election(reg: PartitionRegistration, usable: set[int]) -> PartitionRegistration | None:
    """ElectLeaders UNCLEAN for a partition without a leader: a usable in-sync replica if
    there is one (then nothing is lost), else any usable replica, which leads with an ISR of
    itself (accepting the loss of what only others had)."""
    in_sync = next((r for r in reg.replicas if r in usable and r in reg.isr), NO_LEADER)
    if in_sync != NO_LEADER:
        return reg.with_leader(in_sync, tuple(r for r in reg.isr if r in usable))
    leader = next((r for r in reg.replicas if r in usable), NO_LEADER)
    return None if leader == NO_LEADER else reg.with_leader(leader, (leader,))


def reassign(reg: PartitionRegistration, target: tuple[int, ...]) -> PartitionRegistration:
    """Begin moving a partition to `target` (AlterPartitionReassignments): the new replicas
    join the old ones, fetch as followers, and once all are in sync the old ones leave. A
    reassignment replacing one in progress starts from every current replica, so one that
    was being added (maybe leading, maybe in sync) is removed like any other."""
    current = reg.replicas
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    return replace(
        reg,
        replicas=target + removing,
        adding_replicas=adding,
        removing_replicas=removing,
        partition_epoch=reg.partition_epoch + 1,
    )


def cancel_reassignment(
    reg: PartitionRegistration, usable: set[int]
) -> PartitionRegistration | None:
    """Back to the replicas before the reassignment (the adding ones leave); None when none
    of those is in sync, as reverting would then be an unclean election (Kafka refuses)."""
    replicas = tuple(r for r in reg.replicas if r not in reg.adding_replicas)
    isr = tuple(r for r in reg.isr if r in replicas)
    if not isr:
        return None
    return _with_replicas(reg, replicas, isr, usable)


def _with_replicas(
    reg: PartitionRegistration, replicas: tuple[int, ...], isr: tuple[int, ...], usable: set[int]
) -> PartitionRegistration:
    """`reg` with replicas removed, no reassignment left, and a new leader epoch so that
    the removed replicas' fetches are fenced (the leader moves if it was one of them)."""
    leader = reg.leader
    if leader not in replicas:
        leader = next((r for r in replicas if r in isr and r in usable), NO_LEADER)
    return replace(reg, replicas=replicas, adding_replicas=(), removing_replicas=()).with_leader(
        leader, isr
    )


def reassignment_changes(image: MetadataImage) -> list[PartitionChange]:
    """Reassignments whose target replicas are all in sync (Kafka's completion rule): the
    old replicas leave."""
    usable = image.usable_brokers()
    changes = []
    for topic in image.topics():
        for index, reg in image.registrations(topic.name).items():
            if not reg.adding_replicas and not reg.removing_replicas:
                continue
            target = tuple(r for r in reg.replicas if r not in reg.removing_replicas)
            if any(r not in reg.isr for r in target):
                continue
            isr = tuple(r for r in reg.isr if r in target)
            done = _with_replicas(reg, target, isr, usable)
            changes.append((topic.name, index, reg.partition_epoch, done))
    return changes
