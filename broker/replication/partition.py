"""One partition this broker hosts, as leader or follower: Kafka's Partition.

The leader knows each follower's log end offset from its fetches, keeps the high watermark at
the smallest log end offset of the ISR, proposes ISR changes (followers that stopped keeping
up leave it after replica.lag.time.max.ms; a follower caught up to the leader's epoch start
and its high watermark rejoins it), and tells acks=all produces when their offsets are in
every in-sync replica. Proposals are written by the caller as conditional writes against
the partition epoch: until one is committed the high watermark counts the larger of the two
ISRs (KIP-497's maximal ISR), so a shrink can never expose data a removed follower lacks and
an expansion can never acknowledge data the new member does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.metadata.cluster import PartitionRegistration
from broker.storage import Log


@dataclass(frozen=True)
class IsrProposal:
    """An ISR change to write (Kafka's AlterPartition): conditional on the partition epoch
    it was proposed at, whatever the partition has seen since."""

    expected_partition_epoch: int
    previous_isr: tuple[int, ...]
    registration: PartitionRegistration
    # The broker epochs the joining replicas fetched with: the store refuses a replica
    # registered anew since, as it refuses one fenced (KIP-841).
    joining_epochs: dict[int, int]

    @property
    def isr(self) -> tuple[int, ...]:
        return self.registration.isr

    @property
    def expands(self) -> bool:
        return len(self.isr) > len(self.previous_isr)


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int = -1
    broker_epoch: int = -1
    # The last time the follower had fetched up to the leader's log end (Kafka's
    # lastCaughtUpTimeMs): the ISR lag is measured from it, not from the last fetch.
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    # The leader's log end offset when the follower last fetched: reaching it later counts
    # as having been caught up at that fetch's time.
    leader_end_at_last_fetch: int = -1


class Partition:
    def __init__(
        self, topic: str, index: int, log: Log, node_id: int, registration: PartitionRegistration
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.node_id = node_id
        self.registration = registration
        self.followers: dict[int, FollowerState] = {}
        # An ISR change written but not yet seen committed.
        self.pending: IsrProposal | None = None
        self.leader_epoch_start_offset = -1
        # A follower's distance behind the leader's high watermark at its last fetch.
        self.follower_lag: int | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def is_leader(self) -> bool:
        return self.registration.leader == self.node_id

    @property
    def leader_epoch(self) -> int:
        return self.registration.leader_epoch

    # -- registration changes ----------------------------------------------------------------

    def update(self, registration: PartitionRegistration, now_ms: int) -> bool:
        """Take the registration the metadata store now holds; True when this broker became
        leader with it (a new leader epoch led by us)."""
        old = self.registration
        if registration.partition_epoch < old.partition_epoch:
            return False  # an older view arriving late
        self.registration = registration
        if self.pending is not None and registration.partition_epoch != old.partition_epoch:
            self.pending = None  # committed or overtaken: the store's word stands
        became_leader = registration.leader == self.node_id and (
            old.leader != self.node_id or old.leader_epoch != registration.leader_epoch
        )
        if became_leader:
            self.become_leader(now_ms)
        elif registration.leader != self.node_id:
            self.followers.clear()
        elif registration.replicas != old.replicas:
            # A reassignment under the same leader: new replicas are tracked from now on,
            # removed ones forgotten (and never proposed for the ISR again).
            self.followers = {
                r: self.followers.get(r, FollowerState())
                for r in registration.replicas
                if r != self.node_id
            }
        return became_leader

    def become_leader(self, now_ms: int) -> None:
        # Kafka's makeLeader: the new epoch starts at our log end; followers start unknown
        # and, if in the ISR, count as caught up now so the lag clock starts fresh.
        self.log.assign_epoch_start_offset(self.leader_epoch)
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms if r in self.registration.isr else 0)
            for r in self.registration.replicas
            if r != self.node_id
        }
        self.pending = None

    # -- the leader's view -------------------------------------------------------------------

    @property
    def maximal_isr(self) -> set[int]:
        """The ISR the HW counts: the committed one, with a pending change's members too."""
        isr = set(self.registration.isr)
        if self.pending is not None:
            isr |= set(self.pending.isr)
        return isr

    def record_follower_fetch(
        self, replica_id: int, broker_epoch: int, fetch_offset: int, now_ms: int
    ) -> None:
        state = self.followers.get(replica_id)
        if state is None:
            return
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.leader_end_at_last_fetch >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.broker_epoch = broker_epoch
        state.last_fetch_ms = now_ms
        state.leader_end_at_last_fetch = leader_end

    def isr_expansion(self, eligible: Callable[[int, int], bool]) -> tuple[int, ...] | None:
        """The ISR with the followers that caught up added (Kafka's maybeExpandIsr): a
        follower rejoins once it has the high watermark and everything of the current leader
        epoch's start, so it can never have missed an acknowledged write; and only if
        `eligible(replica, broker_epoch)`: unfenced, and fetching as the broker's current
        incarnation (KIP-903: not a former process of it that lost its disk)."""
        if self.pending is not None or not self.is_leader:
            return None
        isr = self.registration.isr
        joining = [
            r
            for r, state in self.followers.items()
            if r not in isr
            and eligible(r, state.broker_epoch)
            and state.log_end_offset >= self.log.high_watermark
            and state.log_end_offset >= self.leader_epoch_start_offset
        ]
        return tuple([*isr, *sorted(joining)]) if joining else None

    def isr_shrink(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that fell behind for longer than `lag_max_ms`."""
        if self.pending is not None or not self.is_leader:
            return None
        isr = self.registration.isr
        leader_end = self.log.log_end_offset
        # Kafka's isCaughtUp: a follower at the leader's log end is in sync however long ago
        # it fetched (an idle partition); a dead one is the controller's to remove.
        out = {
            r
            for r in isr
            if r != self.node_id
            and (state := self.followers.get(r)) is not None
            and state.log_end_offset != leader_end
            and now_ms - state.last_caught_up_ms > lag_max_ms
        }
        return tuple(r for r in isr if r not in out) if out else None

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        return None if self.pending is None else self.pending.isr

    def propose_isr(self, isr: tuple[int, ...]) -> IsrProposal:
        """The ISR change to write; the HW counts both ISRs meanwhile."""
        old = self.registration
        joining = {
            r: state.broker_epoch
            for r in isr
            if r not in old.isr and (state := self.followers.get(r)) is not None
        }
        self.pending = IsrProposal(old.partition_epoch, old.isr, old.with_isr(isr), joining)
        return self.pending

    def proposal_failed(self, proposal: IsrProposal) -> None:
        # Only this proposal's: one overtaken by a registration change may fail after a
        # newer proposal was made, which the HW must go on counting.
        if self.pending is proposal:
            self.pending = None

    def maybe_increment_high_watermark(self) -> int | None:
        """Move the HW to the smallest log end offset of the (maximal) ISR; returns how many
        bytes became visible to consumers, or None if it did not move."""
        if not self.is_leader:
            return None
        end = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica == self.node_id:
                continue
            state = self.followers.get(replica)
            end = min(end, state.log_end_offset if state is not None else -1)
        before = self.log.committed_bytes
        if end <= self.log.high_watermark or not self.log.maybe_increment_high_watermark(end):
            return None
        return self.log.committed_bytes - before

    def acks_all_error(self, required_offset: int, min_isr: int) -> ErrorCode | None:
        """For an acks=all produce whose records end before `required_offset`: None while it
        must wait, else its outcome (Kafka's checkEnoughReplicasReachOffset)."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.log.high_watermark < required_offset:
            return None
        if len(self.maximal_isr) < min_isr:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def enough_replicas(self, min_isr: int) -> bool:
        """Whether an acks=all produce may be appended at all (NOT_ENOUGH_REPLICAS)."""
        return len(self.registration.isr) >= min_isr

    # -- the follower's view -----------------------------------------------------------------

    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's HW is the leader's, as far as its own log reaches."""
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
        self.follower_lag = max(0, leader_high_watermark - self.log.log_end_offset)
