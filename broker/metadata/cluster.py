"""Who is in the cluster and who holds each partition: the records a broker keeps of its peers
and of every partition's replicas, as KRaft's BrokerRegistration and PartitionRegistration.

Every change to a partition bumps its `partition_epoch` (Kafka's partition epoch, ZooKeeper's
zkVersion before it), every change of leader its `leader_epoch`; writers state the epochs they
saw and a write against any other is refused, so a paused leader or controller changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

NO_LEADER = -1


@dataclass(frozen=True)
class BrokerRegistration:
    node_id: int
    # New at every start of the broker process (KIP-903): a replica whose ISR entry names an
    # older epoch is a broker that restarted, perhaps with less data than it acknowledged.
    broker_epoch: int
    # Advertised endpoints by listener name: (host, port).
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict, hash=False)
    rack: str | None = None
    fenced: bool = False
    in_controlled_shutdown: bool = False

    @property
    def usable(self) -> bool:
        """May lead and be elected: alive (not fenced) and not on its way out."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # A reassignment in progress (AlterPartitionReassignments): `replicas` holds old and new.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @classmethod
    def single(cls, node_id: int) -> PartitionRegistration:
        """A partition of a one-broker cluster: that broker is its only replica and leader."""
        return cls((node_id,), (node_id,), node_id)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def replication_factor(self) -> int:
        """Replicas it will have once a reassignment in progress is done."""
        return len(self.replicas) - len(self.removing_replicas)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    def with_isr(self, isr: tuple[int, ...]) -> PartitionRegistration:
        """The ISR changed under the same leader: a new partition epoch only."""
        return replace(self, isr=isr, partition_epoch=self.partition_epoch + 1)

    def with_leader(self, leader: int, isr: tuple[int, ...]) -> PartitionRegistration:
        """A new leader (or none): new leader and partition epochs."""
        return replace(
            self,
            leader=leader,
            isr=isr,
            leader_epoch=self.leader_epoch + 1,
            partition_epoch=self.partition_epoch + 1,
        )
