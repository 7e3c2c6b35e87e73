"""Transactional offset commits (KIP-98's TxnOffsetCommit) in the group coordinator: pending
until the producer's marker, invisible to OffsetFetch, UNSTABLE to a read_committed one,
committed or dropped by the marker, and the same after a restart.

`Shard` plays the runtime without sockets or files: each partition of `__consumer_offsets` is
a list of batches (plain or transactional, every record through the codec) and markers, and a
restart replays those lists into a fresh coordinator."""

from __future__ import annotations

from collections import defaultdict

from kio.schema.errors import ErrorCode

from broker.coordinator.classic_group import JoinRequest, MemberIdentity, Protocol, SyncRequest
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.consumer_group import HeartbeatRequest
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.offsets import NO_PRODUCER_ID, OffsetCommitRequest
from broker.coordinator.records import decode_record, encode_record
from broker.metadata.image import MetadataImage

MINUTE = 60_000
P1, P2 = 4000, 4001
T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)
UNSTABLE = "unstable"


class Shard:
    def __init__(self, **config) -> None:
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.config = GroupCoordinatorConfig(**config)
        self.coordinator = GroupCoordinator(self.config, MetadataImage("cluster"))
        self.now = 1_000_000
        # partition -> [("batch", producer id, producer epoch, records) | ("marker", pid, commit)]
        self.logs: dict[int, list[tuple]] = defaultdict(list)
        self.coordinator.on_loaded(self.now)

    # -- the runtime's contract ------------------------------------------------------------------

    def write(self, records, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1):
        by_partition = defaultdict(list)
        for record in records:
            by_partition[self.partition(record.key.group_id)].append(record)
        for partition, batch in by_partition.items():
            batch = [decode_record(*encode_record(r)) for r in batch]
            self.logs[partition].append(("batch", producer_id, producer_epoch, batch))
            for record in batch:
                self.coordinator.replay(record, producer_id, producer_epoch)

    def marker(self, group_id: str, producer_id: int, commit: bool) -> None:
        partition = self.partition(group_id)
        self.logs[partition].append(("marker", producer_id, commit))
        self.coordinator.replay_end_transaction(partition, producer_id, commit)

    def restart(self) -> Shard:
        fresh = Shard(**self.config.__dict__)
        fresh.now = self.now
        for partition, entries in self.logs.items():
            for entry in entries:
                if entry[0] == "marker":
                    fresh.coordinator.replay_end_transaction(partition, entry[1], entry[2])
                else:
                    for record in entry[3]:
                        fresh.coordinator.replay(record, entry[1], entry[2])
            fresh.logs[partition] = list(entries)
        fresh.coordinator.on_loaded(fresh.now)
        return fresh

    def advance(self, ms: int) -> None:
        self.now += ms
        for _, task in self.coordinator.timer.expire(self.now):
            self.write(task(self.now))

    def partition(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    # -- requests ------------------------------------------------------------------------------

    def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        offsets: dict,
        *,
        epoch: int = 0,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        metadata: str = "",
    ) -> dict:
        result = self.coordinator.txn_offset_commit(
            group_id,
            producer_id,
            epoch,
            member_id,
            generation,
            instance,
            {tp: (offset, -1, metadata) for tp, offset in offsets.items()},
            self.now,
        )
        self.write(result.records, producer_id, epoch)
        return result.response

    def commit(self, group_id: str, offsets: dict, *, member_id="", generation=-1) -> dict:
        result = self.coordinator.commit_offsets(
            group_id,
            member_id,
            generation,
            None,
            [OffsetCommitRequest(t, p, o) for (t, p), o in offsets.items()],
            self.now,
            9,
        )
        self.write(result.records)
        return result.response

    def fetch(self, group_id: str, partitions=None, *, stable: bool = False) -> dict:
        error, offsets = self.coordinator.fetch_offsets(group_id, partitions, require_stable=stable)
        assert error == ErrorCode.none
        return {
            tp: (
                UNSTABLE
                if o is not None and o.error_code == ErrorCode.unstable_offset_commit
                else (o.offset if o is not None else -1)
            )
            for tp, o in offsets.items()
        }

    def run(self, result):
        self.write(result.records)
        return result.response

    def classic_member(self, group_id: str, *, instance: str | None = None, sync: bool = True):
        """A one-member classic group: (member id, generation), Stable or, without `sync`,
        CompletingRebalance."""
        request = JoinRequest(
            group_id,
            "",
            instance,
            "client",
            "/127.0.0.1",
            10_000,
            30_000,
            "consumer",
            (Protocol("range", b""),),
            3,
        )
        joined = self.run(self.coordinator.join_group(request, self.now))
        self.advance(0)
        response = joined.value
        assert response.error == ErrorCode.none
        if sync:
            synced = self.run(
                self.coordinator.sync_group(
                    SyncRequest(
                        group_id,
                        response.member_id,
                        instance,
                        response.generation_id,
                        None,
                        None,
                        {response.member_id: b""},
                    ),
                    self.now,
                )
            )
            assert synced.value.error == ErrorCode.none
        return response.member_id, response.generation_id


def view(shard: Shard, groups, partitions=(T0, T1, T2)) -> dict:
    """What clients can observe of the groups' offsets."""
    return {
        g: (
            shard.fetch(g, list(partitions)),
            shard.fetch(g, list(partitions), stable=True),
            shard.coordinator.offsets.has_offsets(g),
        )
        for g in groups
    }


def other_group(shard: Shard, group_id: str) -> str:
    """A group placed on another partition than `group_id`."""
    return next(
        g for g in (f"h{i}" for i in range(1000)) if shard.partition(g) != shard.partition(group_id)
    )


# -- pending, committed, aborted ------------------------------------------------------------------


def test_pending_offsets_are_invisible_and_unstable_until_the_commit_marker():
    s = Shard()
    s.commit("g", {T0: 3})
    assert s.txn_commit("g", P1, {T0: 10, T1: 20}) == {T0: ErrorCode.none, T1: ErrorCode.none}
    assert s.fetch("g", [T0, T1, T2]) == {T0: 3, T1: -1, T2: -1}
    assert s.fetch("g", [T0, T1, T2], stable=True) == {T0: UNSTABLE, T1: UNSTABLE, T2: -1}
    # Fetching every partition lists those with a committed offset, as Kafka does.
    assert s.fetch("g", None, stable=True) == {T0: UNSTABLE}
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0, T1, T2], stable=True) == {T0: 10, T1: 20, T2: -1}


def test_the_abort_marker_discards_pending_offsets():
    s = Shard()
    s.commit("g", {T0: 3})
    s.txn_commit("g", P1, {T0: 10, T1: 20})
    s.marker("g", P1, commit=False)
    assert s.fetch("g", [T0, T1], stable=True) == {T0: 3, T1: -1}
    s.marker("g", P1, commit=True)  # a marker without pending offsets changes nothing
    assert s.fetch("g", [T0, T1], stable=True) == {T0: 3, T1: -1}


def test_two_producers_on_one_group_end_independently():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10})
    s.txn_commit("g", P2, {T1: 20, T2: 30})
    s.marker("g", P2, commit=True)
    assert s.fetch("g", [T0, T1, T2], stable=True) == {T0: UNSTABLE, T1: 20, T2: 30}
    s.marker("g", P1, commit=False)
    assert s.fetch("g", [T0, T1, T2], stable=True) == {T0: -1, T1: 20, T2: 30}


def test_a_later_commit_of_the_same_producer_replaces_its_pending_offset():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10})
    s.txn_commit("g", P1, {T0: 11})
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0]) == {T0: 11}


def test_at_the_commit_marker_the_most_recent_commit_of_a_partition_wins():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10, T1: 10})
    s.commit("g", {T0: 20})  # after P1's: kept when P1 commits
    s.txn_commit("g", P2, {T0: 30})  # after the plain commit: replaces it when P2 commits
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0, T1], stable=True) == {T0: UNSTABLE, T1: 10}
    assert s.fetch("g", [T0, T1]) == {T0: 20, T1: 10}
    s.marker("g", P2, commit=True)
    assert s.fetch("g", [T0, T1], stable=True) == {T0: 30, T1: 10}


def test_an_older_transaction_committing_last_does_not_overwrite_a_newer_one():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10})
    s.txn_commit("g", P2, {T0: 30})
    s.marker("g", P2, commit=True)
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0], stable=True) == {T0: 30}


def test_a_marker_ends_only_the_transaction_of_the_groups_on_its_partition():
    s = Shard()
    h = other_group(s, "g")
    s.txn_commit("g", P1, {T0: 10})
    s.txn_commit(h, P1, {T0: 20})
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0], stable=True) == {T0: 10}
    assert s.fetch(h, [T0], stable=True) == {T0: UNSTABLE}
    s.marker(h, P1, commit=False)
    assert s.fetch(h, [T0], stable=True) == {T0: -1}
    assert s.fetch("g", [T0]) == {T0: 10}


# -- validation ------------------------------------------------------------------------------------


def test_a_producer_with_only_a_group_id_creates_a_simple_group():
    s = Shard()
    assert s.txn_commit("fresh", P1, {T0: 1}) == {T0: ErrorCode.none}
    listed = {(g.group_id, g.state, g.group_type) for g in s.coordinator.list_groups()}
    assert listed == {("fresh", "Empty", "classic")}
    assert s.txn_commit("nobody", P1, {T0: 1}, generation=3) == {T0: ErrorCode.illegal_generation}
    assert not s.coordinator.offsets.has_offsets("nobody")


def test_member_fields_are_validated_against_a_classic_group_when_given():
    s = Shard()
    member, generation = s.classic_member("g")
    ok = {T0: ErrorCode.none}
    assert s.txn_commit("g", P1, {T0: 1}, member_id=member, generation=generation) == ok
    assert s.txn_commit("g", P1, {T0: 1}, member_id=member, generation=generation + 1) == {
        T0: ErrorCode.illegal_generation
    }
    assert s.txn_commit("g", P1, {T0: 1}, member_id="stranger", generation=generation) == {
        T0: ErrorCode.unknown_member_id
    }
    # Without member fields (TxnOffsetCommit v0-v2) the group's members do not matter, unlike
    # a plain commit's.
    assert s.txn_commit("g", P1, {T0: 2}) == ok
    assert s.commit("g", {T0: 2}) == {T0: ErrorCode.unknown_member_id}


def test_a_static_member_with_another_member_id_is_fenced():
    s = Shard()
    _, generation = s.classic_member("g", instance="i-1")
    assert s.txn_commit(
        "g", P1, {T0: 1}, member_id="impostor", generation=generation, instance="i-1"
    ) == {T0: ErrorCode.fenced_instance_id}


def test_a_member_may_commit_transactionally_while_the_rebalance_completes():
    s = Shard()
    member, generation = s.classic_member("g", sync=False)
    assert s.coordinator.groups["g"].state_name == "CompletingRebalance"
    assert s.commit("g", {T0: 1}, member_id=member, generation=generation) == {
        T0: ErrorCode.rebalance_in_progress
    }
    assert s.txn_commit("g", P1, {T0: 1}, member_id=member, generation=generation) == {
        T0: ErrorCode.none
    }


def test_a_stale_consumer_group_member_epoch_is_an_illegal_generation():
    s = Shard()
    response = s.run(
        s.coordinator.consumer.heartbeat(
            HeartbeatRequest(
                "cg",
                "m1",
                0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("t",),
                owned_partitions={},
            ),
            s.now,
            client_id="client",
            client_host="/127.0.0.1",
            api_version=1,
        )
    )
    assert response.error_code == ErrorCode.none
    epoch = response.member_epoch
    assert s.txn_commit("cg", P1, {T0: 1}, member_id="m1", generation=epoch) == {T0: ErrorCode.none}
    assert s.txn_commit("cg", P1, {T0: 1}, member_id="m1", generation=epoch + 5) == {
        T0: ErrorCode.illegal_generation
    }
    assert s.txn_commit("cg", P1, {T0: 1}, member_id="m2", generation=epoch) == {
        T0: ErrorCode.unknown_member_id
    }


def test_oversized_metadata_is_refused_per_partition():
    s = Shard(offset_metadata_max_bytes=4)
    errors = s.coordinator.txn_offset_commit(
        "g", P1, 0, "", -1, None, {T0: (1, -1, "too long"), T1: (2, -1, "ok")}, s.now
    )
    assert errors.response == {T0: ErrorCode.offset_metadata_too_large, T1: ErrorCode.none}
    assert [r.key.partition for r in errors.records] == [1]


# -- deletion and retention ------------------------------------------------------------------------


def test_deleting_a_group_drops_its_pending_offsets_and_the_marker_finds_nothing():
    s = Shard()
    s.commit("g", {T0: 1})
    s.txn_commit("g", P1, {T0: 10, T1: 20})
    assert s.run(s.coordinator.delete_groups(["g"])) == {"g": ErrorCode.none}
    assert not s.coordinator.offsets.has_offsets("g")
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0, T1]) == {T0: -1, T1: -1}
    assert s.run(s.coordinator.delete_groups(["g"])) == {"g": ErrorCode.group_id_not_found}


def test_a_group_with_only_pending_offsets_can_be_deleted():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10})
    assert s.run(s.coordinator.delete_groups(["g"])) == {"g": ErrorCode.none}
    assert s.coordinator.list_groups() == []


def test_offset_delete_removes_pending_offsets_too():
    s = Shard()
    s.txn_commit("g", P1, {T0: 10, T1: 20})
    assert s.run(s.coordinator.delete_offsets("g", [T0])) == (
        ErrorCode.none,
        {T0: ErrorCode.none},
    )
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0, T1]) == {T0: -1, T1: 20}


def test_offsets_with_a_pending_transaction_do_not_expire_and_keep_the_group():
    s = Shard(offsets_retention_ms=10 * MINUTE, offsets_retention_check_interval_ms=MINUTE)
    member, generation = s.classic_member("g")
    s.commit("g", {T0: 1, T1: 1}, member_id=member, generation=generation)
    s.run(s.coordinator.leave_group("g", [MemberIdentity(member, None)], s.now))
    assert s.coordinator.groups["g"].state_name == "Empty"
    s.txn_commit("g", P1, {T0: 5})
    s.advance(11 * MINUTE)
    assert s.fetch("g", [T0, T1]) == {T0: 1, T1: -1}  # T1 expired, T0 waits for P1
    assert "g" in s.coordinator.groups
    s.marker("g", P1, commit=True)
    assert s.fetch("g", [T0]) == {T0: 5}
    s.advance(11 * MINUTE)
    assert s.fetch("g", [T0]) == {T0: -1}
    assert "g" not in s.coordinator.groups


# -- replay ----------------------------------------------------------------------------------------


def _mixed(s: Shard) -> None:
    """Plain and transactional commits of two producers interleaved on the same partitions."""
    s.commit("g", {T0: 1, T1: 1, T2: 1})
    s.txn_commit("g", P1, {T0: 10, T1: 10}, epoch=3)
    s.commit("g", {T0: 20})  # newer than P1's T0
    s.txn_commit("g", P2, {T0: 30, T2: 30}, epoch=7)  # newer than both
    s.txn_commit("g", P1, {T2: 40}, epoch=3)  # newer than P2's T2


def test_a_restart_replays_pending_offsets_and_their_markers():
    s = Shard()
    _mixed(s)
    s.marker("g", P2, commit=False)
    restarted = s.restart()
    assert view(restarted, ["g"]) == view(s, ["g"])
    for shard in (s, restarted):
        shard.marker("g", P1, commit=True)
    assert view(restarted, ["g"]) == view(s, ["g"])
    assert s.fetch("g", [T0, T1, T2], stable=True) == {T0: 20, T1: 10, T2: 40}
