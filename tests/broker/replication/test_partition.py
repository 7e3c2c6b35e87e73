"""The leader's and the follower's view of one replicated partition (broker.replication.Partition,
Kafka's Partition and Replica): follower fetch tracking, ISR shrink and expansion, KIP-497's
maximal ISR while a proposal is pending, the high watermark and acks=all outcomes. Real logs
opened as a replicated partition's are (the high watermark moves by replication only)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.metadata.cluster import BrokerRegistration, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.records.batch import build_batch, validate_produce_batch
from broker.replication.partition import FollowerState, Partition
from broker.server.replica_manager import ReplicaManager
from broker.storage import Log, LogConfig, LogManager
from broker.storage.leader_epoch_cache import EpochEntry

T0 = 1_700_000_000_000
LAG = 30_000  # replica.lag.time.max.ms
NODE = 1  # this broker


def open_log(directory) -> Log:
    return Log.open(directory, LogConfig(), high_watermark_follows_appends=False, now_ms=T0)


@pytest.fixture
def log(tmp_path):
    log = open_log(tmp_path / "t-0")
    yield log
    log.close()


def append(log: Log, count: int = 1, *, epoch: int = 0) -> int:
    """Append one batch of `count` records as the leader of `epoch`; its size in bytes."""
    data = build_batch([(None, b"v%d" % i, [], T0 + i) for i in range(count)])
    return log.append(data, validate_produce_batch(data), now_ms=T0, leader_epoch=epoch).size


def leader_partition(
    log: Log, replicas=(1, 2, 3), isr=None, *, now_ms: int = T0, leader_epoch: int = 1
) -> Partition:
    """A partition this broker follows, then is elected leader of (epoch `leader_epoch`)."""
    isr = replicas if isr is None else isr
    following = PartitionRegistration(replicas, isr, 2, leader_epoch - 1, partition_epoch=0)
    partition = Partition("t", 0, log, NODE, following)
    assert not partition.is_leader
    assert partition.update(PartitionRegistration(replicas, isr, NODE, leader_epoch, 1), now_ms)
    return partition


def always(replica: int, broker_epoch: int) -> bool:
    return True


def commit(partition: Partition) -> int | None:
    return partition.maybe_increment_high_watermark()


# -- becoming leader, and registration updates ------------------------------------------------


def test_a_new_leader_starts_its_epoch_at_its_log_end(log):
    append(log, 3, epoch=0)
    p = leader_partition(log, isr=(1, 2))
    assert p.is_leader and p.leader_epoch == 1 and p.tp == ("t", 0)
    assert p.leader_epoch_start_offset == 3
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 3)]
    # Followers start unknown; those in the ISR count as caught up now, the others never.
    assert p.followers == {
        2: FollowerState(last_caught_up_ms=T0),
        3: FollowerState(last_caught_up_ms=0),
    }


def test_update_ignores_an_older_partition_epoch(log):
    p = leader_partition(log)
    current = p.registration
    late = PartitionRegistration((1, 2, 3), (2, 3), 2, leader_epoch=0, partition_epoch=0)
    assert not p.update(late, T0 + 1)
    assert p.registration is current and p.is_leader


def test_an_isr_change_under_the_same_leader_epoch_keeps_the_followers(log):
    append(log, 2)
    p = leader_partition(log)
    p.record_follower_fetch(2, 7, 2, T0 + 5)
    assert not p.update(p.registration.with_isr((1, 2)), T0 + 10)
    assert p.registration.isr == (1, 2)
    assert (p.followers[2].log_end_offset, p.followers[2].last_caught_up_ms) == (2, T0 + 5)
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 2)]


def test_a_leader_reelected_with_a_new_epoch_starts_it_afresh(log):
    append(log, 2)
    p = leader_partition(log, isr=(1, 2))
    p.record_follower_fetch(2, 7, 2, T0 + 5)
    append(log, 1, epoch=1)
    assert p.update(p.registration.with_leader(NODE, (1, 2)), T0 + 20)
    assert p.leader_epoch == 2 and p.leader_epoch_start_offset == 3
    assert log.leader_epochs.entries[-1] == EpochEntry(2, 3)
    assert p.followers == {
        2: FollowerState(last_caught_up_ms=T0 + 20),
        3: FollowerState(last_caught_up_ms=0),
    }


def test_losing_leadership_forgets_the_followers(log):
    append(log, 2)
    p = leader_partition(log)
    p.record_follower_fetch(2, 7, 2, T0)
    p.propose_isr((1, 2))
    assert not p.update(p.registration.with_leader(2, (1, 2, 3)), T0 + 1)
    assert not p.is_leader and p.followers == {} and p.pending_isr is None
    # The leader's work is no longer this broker's.
    p.record_follower_fetch(3, 7, 2, T0 + 2)
    assert p.followers == {}
    assert commit(p) is None and log.high_watermark == 0
    assert p.isr_shrink(T0 + 10 * LAG, LAG) is None
    assert p.isr_expansion(always) is None


def test_a_follower_elected_leader(log):
    size = append(log, 4)
    following = PartitionRegistration((2, 1), (2, 1), 2, leader_epoch=3, partition_epoch=5)
    p = Partition("t", 0, log, NODE, following)
    assert not p.update(replace(following, partition_epoch=6, isr=(2, 1)), T0)
    assert p.update(following.with_leader(NODE, (1,)), T0)
    assert p.is_leader and p.leader_epoch == 4 and p.leader_epoch_start_offset == 4
    assert p.followers == {2: FollowerState(last_caught_up_ms=0)}
    # Alone in the ISR, it commits what it has at once.
    assert commit(p) == size and log.high_watermark == 4


# -- follower fetch tracking (Kafka's Replica.updateFetchStateOrThrow) ----------------------


def test_last_caught_up_time_follows_kafkas_replica(log):
    append(log, 10)
    p = leader_partition(log, isr=(1, 2))
    s = p.followers[3]
    p.record_follower_fetch(3, 7, 5, T0 + 100)  # behind the leader's end (10)
    assert (s.log_end_offset, s.broker_epoch, s.last_fetch_ms) == (5, 7, T0 + 100)
    assert (s.last_caught_up_ms, s.leader_end_at_last_fetch) == (0, 10)
    append(log, 10)  # the leader's end moves to 20
    # Having reached where the leader ended at its previous fetch, it was caught up then.
    p.record_follower_fetch(3, 7, 10, T0 + 200)
    assert s.last_caught_up_ms == T0 + 100
    append(log, 10)  # 30
    p.record_follower_fetch(3, 7, 15, T0 + 300)  # short of 20: no progress on the clock
    assert s.last_caught_up_ms == T0 + 100
    p.record_follower_fetch(3, 7, 30, T0 + 400)  # at the leader's end
    assert s.last_caught_up_ms == T0 + 400
    assert (s.log_end_offset, s.last_fetch_ms, s.leader_end_at_last_fetch) == (30, T0 + 400, 30)


def test_a_fetch_from_a_broker_that_is_no_replica_is_ignored(log):
    p = leader_partition(log)
    p.record_follower_fetch(9, 7, 0, T0)
    assert set(p.followers) == {2, 3}


def test_the_last_caught_up_time_never_goes_back(log):
    append(log, 3)
    p = leader_partition(log)
    p.record_follower_fetch(2, 7, 3, T0 + 500)
    p.record_follower_fetch(2, 7, 3, T0 + 400)  # the wall clock stepped back
    assert p.followers[2].last_caught_up_ms == T0 + 500
    assert p.followers[2].last_fetch_ms == T0 + 400
    # Nor through the other branch: reaching the leader's end at the previous fetch
    # (taken at T0 + 400) does not move it back to that fetch's time.
    append(log, 2)
    p.record_follower_fetch(2, 7, 3, T0 + 600)
    assert p.followers[2].last_caught_up_ms == T0 + 500
    # And it still moves forward.
    p.record_follower_fetch(2, 7, 5, T0 + 700)
    assert p.followers[2].last_caught_up_ms == T0 + 700


def test_record_follower_fetch_takes_the_broker_epoch_it_is_given(log):
    """Which incarnation of a follower may be recorded is the ReplicaManager's check (below):
    the partition records the epoch of the fetch it is handed, for isr_expansion to judge."""
    append(log, 10)
    p = leader_partition(log, isr=(1, 2))
    p.record_follower_fetch(2, 7, 9, T0 + 10)
    p.record_follower_fetch(2, 8, 5, T0 + 20)  # the restarted broker (epoch 8) has 5
    assert (p.followers[2].broker_epoch, p.followers[2].log_end_offset) == (8, 5)
    assert commit(p) is not None and log.high_watermark == 5


def replica_manager(tmp_path, partition: Partition, *brokers: BrokerRegistration):
    """A clustered ReplicaManager hosting `partition`, with `brokers` registered."""
    image = MetadataImage("cluster")
    image.brokers = {b.node_id: b for b in brokers}
    manager = ReplicaManager(
        BrokerConfig({"node.id": str(NODE)}),
        LogManager([tmp_path / "logs"], high_watermark_follows_appends=False),
        image,
    )
    manager.partitions[partition.tp] = partition
    return manager


def test_a_fetch_from_an_older_incarnation_of_the_follower_is_not_recorded(tmp_path, log):
    """KIP-903, Kafka's updateFetchStateOrThrow: a fetch sent by a former process of the
    follower (an older broker epoch) says nothing of the replica the ISR counts on."""
    append(log, 10)
    p = leader_partition(log, isr=(1, 2))
    manager = replica_manager(tmp_path, p, BrokerRegistration(NODE, 1), BrokerRegistration(2, 8))
    manager.follower_fetched(p.tp, 2, 8, 5)  # the restarted broker (epoch 8) has 5
    assert log.high_watermark == 5
    manager.follower_fetched(p.tp, 2, 7, 9)  # a fetch its former process sent, late
    assert (p.followers[2].broker_epoch, p.followers[2].log_end_offset) == (8, 5)
    assert log.high_watermark == 5  # offsets 5..8 are on no other replica
    # Nor a newer epoch than the metadata shows, nor a broker it does not know.
    manager.follower_fetched(p.tp, 2, 9, 9)
    manager.image.brokers.pop(2)
    manager.follower_fetched(p.tp, 2, 8, 9)
    assert (p.followers[2].broker_epoch, p.followers[2].log_end_offset) == (8, 5)
    assert log.high_watermark == 5
    # A fetch older than v15 carries no broker epoch (-1): it is taken.
    manager.follower_fetched(p.tp, 2, -1, 9)
    assert (p.followers[2].broker_epoch, p.followers[2].log_end_offset) == (-1, 9)
    assert log.high_watermark == 9


# -- ISR shrink ---------------------------------------------------------------------------------


def test_isr_shrink_drops_followers_not_caught_up_within_the_lag(log):
    append(log, 5)
    p = leader_partition(log)  # both followers' lag clocks start at T0
    p.record_follower_fetch(2, 7, 5, T0 + 1000)
    assert p.isr_shrink(T0 + LAG, LAG) is None
    assert p.isr_shrink(T0 + LAG + 1, LAG) == (1, 2)  # 3 never fetched
    append(log, 1)  # 2 is behind now too
    assert p.isr_shrink(T0 + 1000 + LAG, LAG) == (1, 2)
    assert p.isr_shrink(T0 + 1000 + LAG + 1, LAG) == (1,)


def test_isr_shrink_keeps_followers_fetching_behind_a_busy_leader(log):
    """Kafka's reason for lastFetchLeaderLogEndOffset: a follower whose every fetch reaches
    where the leader ended at its previous one is in sync, though never at the leader's end."""
    append(log, 10)
    p = leader_partition(log, isr=(1, 2))
    now, offset = T0, log.log_end_offset
    for _ in range(10):
        now += LAG // 2
        leader_end = log.log_end_offset
        p.record_follower_fetch(2, 7, offset, now)
        offset = leader_end  # what this fetch's response brings it
        append(log, 3, epoch=1)  # the leader is ahead again by the next fetch
        assert p.isr_shrink(now + LAG // 2, LAG) is None
    assert p.followers[2].log_end_offset < log.log_end_offset
    assert p.isr_shrink(now + LAG // 2 + 1, LAG) == (1,)


def test_the_leader_never_shrinks_itself_out(log):
    p = leader_partition(log, replicas=(1,), isr=(1,))
    assert p.isr_shrink(T0 + 100 * LAG, LAG) is None


def test_no_shrink_while_a_proposal_is_pending_or_as_follower(log):
    p = leader_partition(log)
    proposal = p.propose_isr((1, 2, 3))
    assert p.isr_shrink(T0 + 10 * LAG, LAG) is None
    p.proposal_failed(proposal)
    assert p.isr_shrink(T0 + 10 * LAG, LAG) == (1,)
    p.update(p.registration.with_leader(2, (2, 3)), T0)
    assert p.isr_shrink(T0 + 10 * LAG, LAG) is None


def test_a_follower_with_all_of_the_leaders_log_stays_in_the_isr(log):
    append(log, 5)
    p = leader_partition(log, isr=(1, 2))
    p.record_follower_fetch(2, 7, 5, T0 + 1000)
    assert p.isr_shrink(T0 + 1000 + LAG + 1, LAG) is None
    assert p.isr_shrink(T0 + 100 * LAG, LAG) is None
    # Once the leader has more, the lag clock counts again.
    append(log, 1)
    assert p.isr_shrink(T0 + 1000 + LAG, LAG) is None
    assert p.isr_shrink(T0 + 1000 + LAG + 1, LAG) == (1,)


# -- ISR expansion (Kafka's maybeExpandIsr) -----------------------------------------------------


def test_a_follower_rejoins_only_with_the_leader_epoch_start(log):
    append(log, 5, epoch=0)  # nothing committed: the high watermark is 0
    p = leader_partition(log, isr=(1, 2))  # epoch 1 starts at 5
    p.record_follower_fetch(3, 7, 4, T0)
    assert log.high_watermark == 0
    assert p.isr_expansion(always) is None  # at the HW, but short of the epoch start
    p.record_follower_fetch(3, 7, 5, T0)
    assert p.isr_expansion(always) == (1, 2, 3)


def test_a_follower_rejoins_only_with_the_high_watermark(log):
    p = leader_partition(log, replicas=(1, 2, 3, 4), isr=(1, 3))
    append(log, 5, epoch=1)
    p.record_follower_fetch(3, 7, 5, T0)
    assert commit(p) is not None and log.high_watermark == 5
    p.record_follower_fetch(2, 7, 4, T0)
    p.record_follower_fetch(4, 7, 4, T0)
    assert p.isr_expansion(always) is None
    p.record_follower_fetch(4, 7, 5, T0)
    p.record_follower_fetch(2, 7, 5, T0)
    # The ISR keeps its order; those joining follow, by id.
    assert p.isr_expansion(always) == (1, 3, 2, 4)


def test_a_follower_rejoins_only_when_eligible(log):
    p = leader_partition(log, isr=(1,))
    append(log, 2, epoch=1)
    commit(p)
    p.record_follower_fetch(2, 7, 2, T0)
    p.record_follower_fetch(3, 8, 2, T0)
    asked = []

    def eligible(replica, broker_epoch):
        asked.append((replica, broker_epoch))
        return replica == 3

    assert p.isr_expansion(eligible) == (1, 3)
    assert sorted(asked) == [(2, 7), (3, 8)]
    assert p.isr_expansion(lambda r, e: False) is None


def test_no_expansion_while_a_proposal_is_pending(log):
    p = leader_partition(log, isr=(1,))
    p.record_follower_fetch(2, 7, 0, T0)
    proposal = p.propose_isr((1,))
    assert p.isr_expansion(always) is None
    p.proposal_failed(proposal)
    assert p.isr_expansion(always) == (1, 2)


def test_a_follower_that_never_fetched_does_not_rejoin(log):
    p = leader_partition(log, isr=(1,))
    assert log.high_watermark == 0 and p.followers[2].log_end_offset == -1
    assert p.isr_expansion(always) is None


# -- the high watermark -------------------------------------------------------------------------


def test_the_high_watermark_is_the_smallest_log_end_of_the_isr(log):
    p = leader_partition(log, replicas=(1, 2, 3, 4), isr=(1, 2, 3))
    sizes = [append(log, epoch=1) for _ in range(4)]
    assert commit(p) is None  # the followers' ends are not known yet
    p.record_follower_fetch(2, 7, 3, T0)
    assert commit(p) is None
    p.record_follower_fetch(3, 7, 1, T0)
    assert commit(p) == sizes[0]
    assert log.high_watermark == 1
    assert commit(p) is None  # unmoved
    p.record_follower_fetch(3, 7, 4, T0)
    assert commit(p) == sizes[1] + sizes[2]
    assert (log.high_watermark, log.committed_bytes) == (3, sum(sizes[:3]))
    p.record_follower_fetch(2, 7, 4, T0)
    assert commit(p) == sizes[3] and log.high_watermark == 4
    # 4, out of the ISR, never held anything back.
    assert p.followers[4].log_end_offset == -1


def test_a_leader_alone_in_the_isr_commits_what_it_appends(log):
    p = leader_partition(log, isr=(1,))
    size = append(log, 3, epoch=1)
    assert log.high_watermark == 0  # a replicated log: appends do not move it
    assert commit(p) == size and log.high_watermark == 3


def test_bytes_appended_before_the_log_was_opened_are_not_counted(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, 3)
    log.close()
    log = open_log(tmp_path / "t-0")  # the high watermark is not known: the log start
    try:
        assert (log.log_end_offset, log.high_watermark) == (3, 0)
        p = leader_partition(log, isr=(1,))
        assert commit(p) == 0  # it moved, though no byte counted since open went below it
        assert log.high_watermark == 3
    finally:
        log.close()


@st.composite
def replication_steps(draw):
    """Appends, and fetches by followers 2 and 3 (in the ISR) and 4 (out of it), each from
    somewhere between where it was and the leader's end."""
    steps = []
    for _ in range(draw(st.integers(1, 25))):
        if draw(st.booleans()):
            steps.append(("append", draw(st.integers(1, 4))))
        else:
            steps.append(("fetch", draw(st.sampled_from((2, 3, 4))), draw(st.floats(0, 1))))
    return steps


@settings(max_examples=60)
@given(steps=replication_steps())
def test_the_high_watermark_tracks_the_isrs_smallest_log_end(tmp_path_factory, steps):
    log = open_log(tmp_path_factory.mktemp("hw") / "t-0")
    try:
        p = leader_partition(log, replicas=(1, 2, 3, 4), isr=(1, 2, 3))
        ends = {2: -1, 3: -1, 4: -1}
        gained = 0
        for step in steps:
            if step[0] == "append":
                append(log, step[1], epoch=1)
            else:
                _, replica, where = step
                start = max(ends[replica], 0)
                ends[replica] = start + round(where * (log.log_end_offset - start))
                p.record_follower_fetch(replica, 7, ends[replica], T0)
            before = log.high_watermark
            moved = commit(p)
            expected = max(before, min(log.log_end_offset, ends[2], ends[3]))
            assert log.high_watermark == expected
            assert (moved is None) == (expected == before)
            gained += moved or 0
            assert log.high_watermark <= min(ends[2], ends[3]) or log.high_watermark == 0
        assert gained == log.committed_bytes
    finally:
        log.close()


# -- ISR proposals and the maximal ISR (KIP-497) ----------------------------------------------


def caught_up(log, p, *replicas):
    for r in replicas:
        p.record_follower_fetch(r, 7, log.log_end_offset, T0)


def test_a_pending_shrink_still_waits_for_the_follower_leaving(log):
    p = leader_partition(log)
    append(log, 4, epoch=1)
    p.record_follower_fetch(2, 7, 4, T0)
    p.record_follower_fetch(3, 7, 2, T0)
    commit(p)
    assert log.high_watermark == 2
    proposal = p.propose_isr((1, 2))
    proposed = proposal.registration
    assert proposed == replace(p.registration, isr=(1, 2), partition_epoch=2)
    assert proposal.expected_partition_epoch == 1 and not proposal.expands
    assert p.pending_isr == (1, 2) and p.maximal_isr == {1, 2, 3}
    assert commit(p) is None and log.high_watermark == 2
    # The same registration again (no new partition epoch): still pending.
    assert not p.update(p.registration, T0)
    assert p.pending_isr == (1, 2) and commit(p) is None
    # The proposal committed.
    assert not p.update(proposed, T0)
    assert p.pending_isr is None and p.registration == proposed
    assert commit(p) is not None and log.high_watermark == 4


def test_a_pending_expansion_already_waits_for_the_follower_joining(log):
    p = leader_partition(log, isr=(1, 2))
    append(log, 2, epoch=1)
    caught_up(log, p, 2, 3)
    commit(p)
    assert p.isr_expansion(always) == (1, 2, 3)
    proposal = p.propose_isr((1, 2, 3))
    assert proposal.expands and p.maximal_isr == {1, 2, 3}
    append(log, 2, epoch=1)
    caught_up(log, p, 2)
    assert commit(p) is None and log.high_watermark == 2  # 3 has not got 2..3
    # The proposal failed: the registration's ISR stands, without 3.
    p.proposal_failed(proposal)
    assert p.pending_isr is None and p.maximal_isr == {1, 2}
    assert commit(p) is not None and log.high_watermark == 4


def test_a_proposal_overtaken_by_another_change_is_dropped(log):
    p = leader_partition(log)
    p.propose_isr((1, 2))
    controllers = p.registration.with_isr((1, 3))  # written first, by the controller
    assert not p.update(controllers, T0)
    assert p.pending_isr is None and p.registration.isr == (1, 3)
    assert p.maximal_isr == {1, 3}


def test_a_proposal_is_conditional_on_the_epoch_it_was_made_at(log):
    # Written after the controller's change, it must be refused, not restore the ISR the
    # controller shrank: its expected epoch is the one it was proposed at.
    p = leader_partition(log)
    proposal = p.propose_isr((1, 2))
    assert not p.update(p.registration.with_isr((1, 3)), T0)
    assert p.registration.partition_epoch == 2
    assert proposal.expected_partition_epoch == 1


def test_an_overtaken_proposal_failing_leaves_a_newer_one_pending(log):
    p = leader_partition(log, isr=(1, 2))
    append(log, 2, epoch=1)
    caught_up(log, p, 2, 3)
    commit(p)
    stale = p.propose_isr((1,))
    assert not p.update(p.registration.with_isr((1, 2)), T0)  # overtaken: dropped
    newer = p.propose_isr((1, 2, 3))
    p.proposal_failed(stale)  # the stale write's refusal arrives now
    assert p.pending is newer and p.maximal_isr == {1, 2, 3}
    append(log, 2, epoch=1)
    caught_up(log, p, 2)
    assert commit(p) is None and log.high_watermark == 2  # 3 still counted


# -- acks=all -----------------------------------------------------------------------------------


def test_acks_all_outcomes(log):
    p = leader_partition(log, isr=(1, 2))
    assert p.enough_replicas(2) and not p.enough_replicas(3)
    append(log, 3, epoch=1)
    assert p.acks_all_error(3, min_isr=2) is None  # waiting for the ISR
    caught_up(log, p, 2)
    commit(p)
    assert p.acks_all_error(3, min_isr=2) == ErrorCode.none
    assert p.acks_all_error(1, min_isr=2) == ErrorCode.none
    assert p.acks_all_error(4, min_isr=2) is None
    # The ISR shrank while the produce waited: written, but not as durably as asked.
    p.update(p.registration.with_isr((1,)), T0)
    assert not p.enough_replicas(2)
    append(log, 1, epoch=1)
    assert p.acks_all_error(4, min_isr=2) is None
    commit(p)
    assert p.acks_all_error(4, min_isr=2) == ErrorCode.not_enough_replicas_after_append
    assert p.acks_all_error(4, min_isr=1) == ErrorCode.none
    p.update(p.registration.with_leader(2, (1, 2)), T0)
    assert p.acks_all_error(4, min_isr=1) == ErrorCode.not_leader_or_follower


def test_acks_all_counts_the_maximal_isr(log):
    p = leader_partition(log, isr=(1,))
    append(log, 2, epoch=1)
    caught_up(log, p, 2)
    proposal = p.propose_isr(p.isr_expansion(always))  # (1, 2), not committed yet
    append(log, 1, epoch=1)
    caught_up(log, p, 2)
    assert commit(p) is not None and log.high_watermark == 3  # 2 has it
    assert p.acks_all_error(3, min_isr=2) == ErrorCode.none
    assert p.acks_all_error(3, min_isr=3) == ErrorCode.not_enough_replicas_after_append
    # The expansion failed: the committed ISR (1) is all there is again.
    p.proposal_failed(proposal)
    assert p.acks_all_error(3, min_isr=2) == ErrorCode.not_enough_replicas_after_append


# -- reassignments seen by the leader -----------------------------------------------------------


def test_a_replica_added_under_the_same_leader_epoch_can_join_the_isr(log):
    p = leader_partition(log)
    append(log, 2, epoch=1)
    caught_up(log, p, 2, 3)
    commit(p)
    reg = p.registration
    adding = replace(
        reg, replicas=(1, 2, 3, 4), adding_replicas=(4,), partition_epoch=reg.partition_epoch + 1
    )
    before = dict(p.followers)
    assert not p.update(adding, T0)
    assert p.leader_epoch == reg.leader_epoch
    # The new replica is tracked from now on; the others keep what the leader knew of them.
    assert p.followers == {**before, 4: FollowerState()}
    assert p.followers[2] is before[2] and p.followers[2].log_end_offset == 2
    assert p.isr_expansion(always) is None  # 4 has not fetched yet
    p.record_follower_fetch(4, 7, 2, T0)
    assert p.isr_expansion(always) == (1, 2, 3, 4)


def test_a_replica_removed_under_the_same_leader_epoch_is_not_proposed_for_the_isr(log):
    p = leader_partition(log)
    append(log, 2, epoch=1)
    caught_up(log, p, 2, 3)
    commit(p)
    reg = p.registration
    assert not p.update(
        replace(reg, replicas=(1, 2), isr=(1, 2), partition_epoch=reg.partition_epoch + 1), T0
    )
    assert set(p.followers) == {2} and p.followers[2].log_end_offset == 2
    assert p.isr_expansion(always) is None
    p.record_follower_fetch(3, 7, 2, T0)  # a late fetch of the removed replica
    assert set(p.followers) == {2} and p.isr_expansion(always) is None


def test_a_completed_reassignment_with_a_new_leader_epoch_starts_the_followers_afresh(log):
    """The controller bumps the leader epoch when replicas leave (elections._with_replicas),
    so the leader takes the new replica set as a new leader would."""
    append(log, 2)
    p = leader_partition(log, replicas=(1, 2, 3, 4), isr=(1, 2, 3, 4))
    caught_up(log, p, 2, 3, 4)
    commit(p)
    reg = replace(p.registration, replicas=(1, 2, 4), adding_replicas=(), removing_replicas=())
    assert p.update(reg.with_leader(NODE, (1, 2, 4)), T0 + 50)
    assert p.leader_epoch == reg.leader_epoch + 1
    assert p.followers == {
        2: FollowerState(last_caught_up_ms=T0 + 50),
        4: FollowerState(last_caught_up_ms=T0 + 50),
    }
    assert p.isr_expansion(always) is None


# -- the follower's view ------------------------------------------------------------------------


def test_a_followers_high_watermark_is_the_leaders_within_its_log(log):
    following = PartitionRegistration((2, 1), (2, 1), 2, leader_epoch=3, partition_epoch=5)
    p = Partition("t", 0, log, NODE, following)
    assert p.follower_lag is None
    append(log, 5, epoch=3)
    p.follower_high_watermark(3)
    assert (log.high_watermark, p.follower_lag) == (3, 0)
    p.follower_high_watermark(8)
    assert (log.high_watermark, p.follower_lag) == (5, 3)
    append(log, 3, epoch=3)
    p.follower_high_watermark(8)
    assert (log.high_watermark, p.follower_lag) == (8, 0)


def test_a_fenced_broker_named_leader_leads_nothing(tmp_path, log):
    """A registration from before this broker was fenced (or restarted) that still names it
    leader must not make it one: followers with more data would truncate to what survived
    here. It leads once unfenced and named again (a new registration from the controller)."""
    manager = replica_manager(tmp_path, leader_partition(log))
    manager.broker_epoch = 5
    manager.image.brokers = {NODE: BrokerRegistration(NODE, 5, fenced=True)}
    topic = TopicMetadata("t", uuid.uuid4(), 1)
    named = PartitionRegistration((NODE, 2), (NODE, 2), NODE, leader_epoch=3, partition_epoch=4)
    manager.image.put(topic, {0: named})
    manager.open_partitions(topic)
    led, _, _ = manager.apply_registrations(topic, T0)
    assert led == [] and not manager.partition("t", 0).is_leader
    manager.image.brokers = {NODE: BrokerRegistration(NODE, 5)}
    elected = replace(named, leader_epoch=4, partition_epoch=5)
    manager.image.put(topic, {0: elected})
    led, _, _ = manager.apply_registrations(topic, T0)
    assert [p.tp for p in led] == [("t", 0)] and manager.partition("t", 0).is_leader
    # An unfenced registration of an earlier process of this broker is not this one's.
    manager.image.brokers = {NODE: BrokerRegistration(NODE, 4)}
    assert not manager.may_lead()
