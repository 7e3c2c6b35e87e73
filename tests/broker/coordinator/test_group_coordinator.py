"""Coordinator-wide operations: offset retention through the timer, listing and deleting groups."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

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
