"""Seed 002's parallel-rebalance mode (`enable_parallel_rebalance=True`): fresh records first
after a take-over, the backlog in parallel.

When the member gets a partition whose committed offset lags the log end, the primary consumer
(the application's) jumps to the end and goes on with new records, while a child consumer (a
second fetcher with its own connections and fetch sessions) reads the gap [committed, end).
Both feed the same `getmany()` / iteration, so order across them is not kept; at-least-once is.
Once its gaps are done the child stays on standby for the next take-over.

What is processed is kept as two commit logs per partition, `gaps.PartitionGaps`: the primary's
position and the child's progress in each gap, written together in one OffsetCommit (offset:
the low-water mark; metadata: the range token). Commits therefore go through the member's own
group identity, fenced by the generation / member epoch like any commit: a revoked member and
its child cannot write. `committed()` answers the low-water mark (the child's progress until
its gaps are done, then the primary's), `position()` the primary's, `commit()` splits offsets
between the two logs as the seed says, `beginning_offsets()` / `end_offsets()` answer the
earliest and the latest offsets either consumer has handed out (one past it, for the end), and
pause, resume and close act on both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from broker.client.consumer.fetcher import Fetcher
from broker.client.consumer.gaps import GapRange, PartitionGaps
from broker.client.consumer.subscription_state import EARLIEST, SubscriptionState
from broker.client.models import ConsumerRecord, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from broker.client.consumer import Consumer

Records = Mapping[TopicPartition, list[ConsumerRecord]]


class ParallelRebalance:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        # The logs as last committed (or found at take-over), and as handed out since.
        self.committed: dict[TopicPartition, PartitionGaps] = {}
        self.handed_out: dict[TopicPartition, PartitionGaps] = {}
        self._snapshot: dict[TopicPartition, PartitionGaps] = {}
        # The gap the child reads in each partition (one at a time, oldest first).
        self.reading: dict[TopicPartition, GapRange] = {}
        # Offsets handed out by either consumer since the take-over: (lowest, highest).
        self.bounds: dict[TopicPartition, tuple[int, int]] = {}
        # A gap's start may have gone to retention meanwhile: the child starts at the log start.
        self.child_subscriptions = SubscriptionState(EARLIEST)
        self.child: Fetcher | None = None

    def child_consumer_is_alive(self) -> bool:
        """Whether the child consumer has been started (it stays on standby once its gaps are
        done) and its fetch loop still runs."""
        return self.child is not None and self.child.running

    # -- take-over and hand-back ------------------------------------------------------------

    async def take_over(self, partitions: Iterable[TopicPartition]) -> None:
        """For newly assigned partitions: restore both logs from the committed offset and its
        token, put the primary at the log end and give what it skips to the child. Partitions
        with nothing committed start where auto_offset_reset says, with no gap."""
        wanted = [tp for tp in partitions if self.consumer.subscriptions.is_assigned(tp)]
        if not wanted:
            return
        committed = await self.consumer._fetch_committed(wanted)
        found = {tp: c for tp, c in committed.items() if c is not None and c.offset >= 0}
        ends = await self.consumer.log_end_offsets(found)
        for tp, offset in found.items():
            gaps, _ = PartitionGaps.restore(offset).open_gap(ends[tp])
            self.committed[tp] = self.handed_out[tp] = gaps
            self.consumer.subscriptions.seek(tp, gaps.primary)
            self._read_next_gap(tp)

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Revoked or lost: the child stops reading them; nothing more is committed for them."""
        gone = [tp for tp in partitions if tp in self.child_subscriptions.partitions]
        for tp in gone:
            if self.child is not None:
                self.child.forget_buffered(tp)
        self.child_subscriptions.remove_partitions(gone)
        for tp in partitions:
            for table in (self.committed, self.handed_out, self._snapshot, self.reading):
                table.pop(tp, None)
            self.bounds.pop(tp, None)

    def _read_next_gap(self, tp: TopicPartition) -> None:
        """Point the child at the oldest open gap of `tp`, if it is not reading one."""
        if tp in self.reading:
            return
        ranges = self.handed_out[tp].ranges
        if not ranges:
            self.child_subscriptions.remove_partitions([tp])
            return
        gap = ranges[0]
        self.reading[tp] = gap
        self.child_subscriptions.assign_range(tp, gap.progress, gap.end)
        if tp in self.consumer.subscriptions.paused():
            self.child_subscriptions.pause([tp])
        self._start_child()

    def _start_child(self) -> None:
        if self.child is None:
            self.child = self.consumer.make_fetcher(self.child_subscriptions)
            self.consumer.add_fetcher(self.child)
            self.child.start()

    # -- what was handed out ----------------------------------------------------------------

    def before_poll(self) -> None:
        """What was handed out before this poll counts as processed for auto-commit."""
        self._snapshot = self._current()

    def after_drain(self, records: Records) -> None:
        for tp, batch in records.items():
            if batch:
                low, high = self.bounds.get(tp, (batch[0].offset, batch[-1].offset))
                self.bounds[tp] = (min(low, batch[0].offset), max(high, batch[-1].offset))
        self.handed_out.update(self._current())
        for tp, gap in list(self.reading.items()):
            still_open = any(
                (r.start, r.end) == (gap.start, gap.end) for r in self.handed_out[tp].ranges
            )
            if not still_open:  # the child handed out the whole gap: on to the next one
                del self.reading[tp]
                self._read_next_gap(tp)

    def _current(self) -> dict[TopicPartition, PartitionGaps]:
        """Both consumers' positions folded into the logs of every tracked partition."""
        current = {}
        for tp, gaps in self.handed_out.items():
            state = self.consumer.subscriptions.partitions.get(tp)
            if state is not None and state.position is not None:
                gaps = gaps.advance(state.position) if gaps.owner(state.position) is None else gaps
            gap = self.reading.get(tp)
            child = self.child_subscriptions.partitions.get(tp)
            if gap is not None and child is not None and child.position is not None:
                gaps = gaps.advance(child.position, gap)
            current[tp] = gaps
        return current

    # -- committing -------------------------------------------------------------------------

    def to_commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None, processed: bool
    ) -> dict[TopicPartition, PartitionGaps]:
        """The logs a commit writes: `offsets` split between them as the seed says, or what
        was handed out (before this poll, for auto-commit: `processed`)."""
        if offsets is None:
            source = self._snapshot if processed else self._current()
            return {tp: source[tp] for tp in source if tp in self.committed}
        out = {}
        for tp, om in offsets.items():
            base = self.committed.get(tp) or PartitionGaps(om.offset)
            out[tp] = base.advance(om.offset).with_user_metadata(om.metadata)
        return out

    def tracks(self, tp: TopicPartition) -> bool:
        """Whether `tp` was taken over in this mode: committed only with its token."""
        return tp in self.committed

    def committed_with(self, logs: Mapping[TopicPartition, PartitionGaps]) -> None:
        """The commit of `logs` succeeded."""
        for tp, gaps in logs.items():
            if tp in self.committed:
                self.committed[tp] = gaps

    # -- the seed's answers -----------------------------------------------------------------

    @staticmethod
    def low_water(committed: OffsetAndMetadata | None) -> OffsetAndMetadata | None:
        """What `committed()` answers: the low-water mark, with the application's metadata."""
        if committed is None:
            return None
        gaps = PartitionGaps.restore(committed)
        return OffsetAndMetadata(gaps.low_water, gaps.user_metadata, committed.leader_epoch)

    def processed_bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple]:
        return {tp: self.bounds[tp] for tp in partitions if tp in self.bounds}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.child_subscriptions.pause(
            tp for tp in partitions if tp in self.child_subscriptions.partitions
        )

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.child_subscriptions.resume(
            tp for tp in partitions if tp in self.child_subscriptions.partitions
        )
