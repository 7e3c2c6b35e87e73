"""Leadership this broker learned from the other brokers while the metadata store did not
answer it.

A broker cut from PostgreSQL cannot hear that the controller fenced it and elected new leaders
for its partitions: by its own image it still leads them. Writes it takes are never
acknowledged (its followers left it), so nothing is lost, but its clients stay with it:
librdkafka sends Metadata to the broker connection it used last, which is this one, and keeps
being told that this broker leads. So while the store is out of reach the broker asks the
others what they know of the partitions it leads, and gives up each one that a newer leader
epoch leads elsewhere: it names that leader in Metadata and refuses the partition's requests
as a former leader does (NOT_LEADER_OR_FOLLOWER). Leader epochs only grow, and only the
controller's elections make new ones, so a newer epoch named by any broker is one the store
holds; the store's own record takes over once it answers again."""

from __future__ import annotations

from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PeerLeadership:
    """A partition's leadership as another broker answered it in Metadata."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class SupersededLeadership:
    def __init__(self) -> None:
        self._learned: dict[TopicPartition, PeerLeadership] = {}

    def learn(self, tp: TopicPartition, answer: PeerLeadership) -> bool:
        """Keep the newest leadership heard of `tp`; True when `answer` is newer than what was
        known."""
        known = self._learned.get(tp)
        if known is not None and known.leader_epoch >= answer.leader_epoch:
            return False
        self._learned[tp] = answer
        return True

    def newer_than(self, tp: TopicPartition, leader_epoch: int) -> PeerLeadership | None:
        """The leadership of `tp` another broker named at an epoch past `leader_epoch`, the
        one this broker leads at; None when none did."""
        known = self._learned.get(tp)
        return known if known is not None and known.leader_epoch > leader_epoch else None

    def clear(self) -> None:
        """The store answers again: its record is the one to follow."""
        self._learned.clear()

    def __bool__(self) -> bool:
        return bool(self._learned)
