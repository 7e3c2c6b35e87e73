"""What a consumer reads, as a plain object (Kafka's SubscriptionState).

The subscription is one of three kinds: topic names, a regex pattern (matched in full against
topic names, as Java's `Pattern.matcher(topic).matches()`), or partitions assigned by the user.
For each partition the consumer holds, the state keeps:

- `position`: the offset of the next record handed to the user (what `position()` answers and
  what `commit()` without offsets commits); None until it is known (committed offset or reset);
- `reset_strategy`: set when the position must be looked up with ListOffsets;
- `paused`: no fetches, nothing handed out;
- `stop_offset`: an exclusive end for explicit ranges (a fetcher reading [start, stop) on its own).

The fetcher reads positions from here and moves them as it hands records out; listeners are told
of every change so that a waiting fetch loop can look again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.client.errors import IllegalStateError
from broker.client.models import OffsetAndMetadata, TopicPartition

EARLIEST, LATEST, NONE = "earliest", "latest", "none"


@dataclass
class PartitionState:
    position: int | None = None
    leader_epoch: int = -1  # of the last record handed out, committed with its offset
    reset_strategy: str | None = None
    paused: bool = False
    stop_offset: int | None = None

    def within_range(self, offset: int) -> int:
        """A position moved past skipped batches stays at a range's stop (a fetcher reading
        [start, stop) goes no further)."""
        if self.stop_offset is None:
            return offset
        return min(offset, max(self.stop_offset, self.position))

    @property
    def exhausted(self) -> bool:
        return (
            self.stop_offset is not None
            and self.position is not None
            and self.position >= self.stop_offset
        )


class SubscriptionState:
    def __init__(self, default_reset_strategy: str = LATEST) -> None:
        self.default_reset_strategy = default_reset_strategy
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.user_assigned = False
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self._listeners: list[Callable[[], None]] = []

    # -- the subscription -------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | re.Pattern[str] | str) -> None:
        """Topic names or a pattern (a `re.Pattern`, or a string starting with `^`, as
        librdkafka takes regexes)."""
        if self.user_assigned:
            raise IllegalStateError("subscribe() after assign(): unsubscribe() first")
        if isinstance(topics, str) and topics.startswith("^"):
            topics = re.compile(topics)
        if isinstance(topics, re.Pattern):
            self.pattern, self.topics = topics, frozenset()
        else:
            names = [topics] if isinstance(topics, str) else list(topics)
            if any(not isinstance(t, str) or not t for t in names):
                raise IllegalStateError(f"topic names must be non-empty strings: {names!r}")
            self.pattern, self.topics = None, frozenset(names)
        self._changed()

    def assign_from_user(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        if self.has_group_subscription:
            raise IllegalStateError("assign() after subscribe(): unsubscribe() first")
        wanted = {TopicPartition(*tp) for tp in partitions}
        self.user_assigned = bool(wanted)
        self._set_assignment(wanted)

    def assign_range(self, tp: TopicPartition, start: int, stop: int) -> None:
        """Read [start, stop) of one partition, beside any other user-assigned ones."""
        if self.has_group_subscription:
            raise IllegalStateError("assign_range() with a group subscription")
        self.user_assigned = True
        self.partitions[TopicPartition(*tp)] = PartitionState(position=start, stop_offset=stop)
        self._changed()

    def unsubscribe(self) -> None:
        self.topics, self.pattern, self.user_assigned = frozenset(), None, False
        self.partitions.clear()
        self._changed()

    @property
    def has_group_subscription(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        return topic in self.topics

    def subscribed_topics(self, cluster_topics: Iterable[str]) -> set[str]:
        """The names to join with: the listed ones, or the cluster's topics the pattern
        matches."""
        if self.pattern is None:
            return set(self.topics)
        return {t for t in cluster_topics if self.matches(t)}

    # -- the assignment ---------------------------------------------------------------------

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment replaces the current one; kept partitions keep their state."""
        self._set_assignment({TopicPartition(*tp) for tp in partitions})

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.setdefault(TopicPartition(*tp), PartitionState())
        self._changed()

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.pop(TopicPartition(*tp), None)
        self._changed()

    def _set_assignment(self, wanted: set[TopicPartition]) -> None:
        self.partitions = {tp: self.partitions.get(tp) or PartitionState() for tp in sorted(wanted)}
        self._changed()

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self.partitions[TopicPartition(*tp)]
        except KeyError:
            raise IllegalStateError(f"{tp} is not assigned to this consumer") from None

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    # -- positions --------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        state = self.state(tp)
        state.position, state.leader_epoch, state.reset_strategy = offset, leader_epoch, None
        self._changed()

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Look the position up again: earliest, latest, or the consumer's default."""
        state = self.state(tp)
        state.position, state.reset_strategy = None, strategy or self.default_reset_strategy
        self._changed()

    def needs_reset(self) -> dict[TopicPartition, str]:
        return {tp: s.reset_strategy for tp, s in self.partitions.items() if s.reset_strategy}

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a pending reset: their committed offset is
        still to be fetched."""
        return [
            tp
            for tp, s in self.partitions.items()
            if s.position is None and s.reset_strategy is None
        ]

    def fetchable(self) -> list[TopicPartition]:
        return [
            tp
            for tp, s in self.partitions.items()
            if s.position is not None and not s.paused and not s.exhausted
        ]

    def advance(self, tp: TopicPartition, position: int, leader_epoch: int = -1) -> None:
        """Records up to `position` were handed out (no listener call: nothing to refetch)."""
        state = self.partitions[tp]
        state.position = position
        if leader_epoch >= 0:
            state.leader_epoch = leader_epoch

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What commit() without offsets writes: every position known."""
        return {
            tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
            for tp, s in self.partitions.items()
            if s.position is not None
        }

    # -- pausing ----------------------------------------------------------------------------

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = True
        self._changed()

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = False
        self._changed()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.partitions.items() if s.paused}

    # -- listeners --------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()
