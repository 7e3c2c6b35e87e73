"""Coordinator-wide operations: offset retention through the timer, listing and deleting groups."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.coordinator.classic_group import JoinRequest, Protocol, join_key
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.offsets import OffsetCommitRequest
from broker.coordinator.records import decode_record, encode_record
from broker.metadata.image import MetadataImage

MINUTE = 60_000


class Coordinator:
    def __init__(self, **config) -> None:
        self.coordinator = GroupCoordinator(
            GroupCoordinatorConfig(**config), MetadataImage("cluster")
        )
        self.now = 0
        self.coordinator.on_loaded(self.now)

    def apply(self, records) -> None:
        for record in records:
            self.coordinator.replay(decode_record(*encode_record(record)))

    def run(self, result):
        self.apply(result.records)
        return result.response

    def advance(self, ms: int) -> None:
        self.now += ms
        for _, task in self.coordinator.timer.expire(self.now):
            self.apply(task(self.now))

    def commit(self, group: str, offset: int) -> dict:
        return self.run(
            self.coordinator.commit_offsets(
                group, "", -1, None, [OffsetCommitRequest("t", 0, offset)], self.now, 9
            )
        )


def test_offsets_of_groups_without_members_expire_after_the_retention():
    c = Coordinator(offsets_retention_ms=10 * MINUTE, offsets_retention_check_interval_ms=MINUTE)
    assert c.commit("old", 5) == {("t", 0): ErrorCode.none}
    c.advance(6 * MINUTE)
    c.commit("young", 7)
    c.advance(5 * MINUTE)  # "old" is 11 minutes old, "young" 5
    names = {g.group_id for g in c.coordinator.list_groups()}
    assert names == {"young"}
    c.advance(6 * MINUTE)
    assert c.coordinator.list_groups() == []


def test_list_and_delete_simple_groups():
    c = Coordinator()
    c.commit("a", 1)
    c.commit("b", 2)
    listed = {(g.group_id, g.state, g.group_type) for g in c.coordinator.list_groups()}
    assert listed == {("a", "Empty", "classic"), ("b", "Empty", "classic")}
    assert c.coordinator.list_groups(states={"stable"}) == []
    assert c.run(c.coordinator.delete_groups(["a", "zzz"])) == {
        "a": ErrorCode.none,
        "zzz": ErrorCode.group_id_not_found,
    }
    assert [g.group_id for g in c.coordinator.list_groups()] == ["b"]


def test_unloading_a_partition_forgets_its_groups_and_answers_their_parked_requests():
    """Another broker leads the partition now (a cluster's failover): its groups, offsets and
    timers go, and a member parked in JoinGroup is told NOT_COORDINATOR."""
    c = Coordinator(offsets_topic_partitions=4)
    groups = [f"group-{i}" for i in range(12)]
    for group in groups:
        c.commit(group, 1)
    lost = c.coordinator.partition_for("group-0")
    # JoinGroup v3 names no member id: the member waits in the group's first rebalance.
    protocols = (Protocol("range", b""),)
    join = JoinRequest("group-0", "", None, "c", "/h", 10_000, 10_000, "consumer", protocols, 3)
    parked = c.run(c.coordinator.join_group(join, c.now))
    assert not parked.done and c.coordinator.timer.is_scheduled(join_key("group-0"))

    c.coordinator.unload([lost])

    assert parked.done and parked.value.error is ErrorCode.not_coordinator
    assert not c.coordinator.timer.is_scheduled(join_key("group-0"))
    kept = {g for g in groups if c.coordinator.partition_for(g) != lost}
    assert {g.group_id for g in c.coordinator.list_groups()} == kept
    assert c.coordinator.fetch_offsets("group-0", None) == (ErrorCode.none, {})
