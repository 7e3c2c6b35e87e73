"""Idempotent batches refused before their sequence was checked, remembered for a moment so
that the batches a producer pipelined behind one are refused alike.

An idempotent producer keeps up to five requests of a partition in flight. When the first is
refused with a retriable error that wrote nothing (NOT_LEADER_OR_FOLLOWER from a broker that
has not yet learnt it leads, NOT_ENOUGH_REPLICAS while the ISR is short) and the cause is gone
before the next arrives (the leadership applied, the ISR grown), Kafka checks the next one's
sequence and answers OUT_OF_ORDER_SEQUENCE_NUMBER: it skips the refused batch. librdkafka
(issue #4953, open in 2.16) answers that by bumping the producer epoch once its requests have
drained, and renumbers under the new epoch every record it holds for a retry, on every
partition, records an earlier timed-out request may already have written among them: a
duplicate the broker cannot recognise. The fault tests' checkers caught it after a leader
change.

The batch behind a refused one was sent before the producer heard of the refusal, so the
refusal's own error is what it would have got had it come a moment earlier: answering that
is a possible order of events, the producer retries both in order, and no epoch is bumped.
A gap that no refusal explains is still OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader

TopicPartition = tuple[str, int]

# How long a refusal explains a later gap: a pipelined batch is sent before the producer reads
# the refusal, which can wait behind the answers to earlier requests of its connection (acks=all
# ones, up to their timeout: 30 s by default in Kafka's clients).
PIPELINE_WINDOW_MS = 60_000

# A producer keeps at most five requests of a partition in flight: the refused batches a hole
# can start at. And a bound on what refusals, whose producer ids no check has vouched for, hold.
REFUSED_PER_PRODUCER = 5
MAX_REFUSALS = 10_000


@dataclass(frozen=True)
class _Refusal:
    producer_epoch: int
    first_sequences: tuple[int, ...]  # of its refused batches, the latest last
    error_code: ErrorCode
    at_ms: int


class RefusedBatches:
    """The latest refused batches of each (partition, producer), until the producer writes to
    the partition or PIPELINE_WINDOW_MS passes. A producer the partition's log does not know
    is held back as long, even when its state went (DeleteRecords, expiry) after a refusal:
    a minute at most, and retried."""

    def __init__(self, window_ms: int = PIPELINE_WINDOW_MS) -> None:
        self.window_ms = window_ms
        # Oldest first, so that expired refusals are dropped from the front.
        self._refusals: OrderedDict[tuple[TopicPartition, int], _Refusal] = OrderedDict()

    def __len__(self) -> int:
        return len(self._refusals)

    def refused(
        self, tp: TopicPartition, header: BatchHeader, error_code: ErrorCode, now_ms: int
    ) -> None:
        """`header`'s batch was refused with `error_code` before its sequence was checked."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        self._expire(now_ms)
        key = (tp, header.producer_id)
        known = self._refusals.get(key)
        firsts: tuple[int, ...] = ()
        if known is not None:
            if header.producer_epoch < known.producer_epoch:
                return  # a zombie's late request: the current epoch's holes stay
            if header.producer_epoch == known.producer_epoch:
                # Several holes: a follower refuses a batch, the leader writes it and it is
                # replicated here, then a later one is refused; which one a gap starts at
                # is known only once the log says what it expects.
                firsts = tuple(f for f in known.first_sequences if f != header.base_sequence)
            del self._refusals[key]
        firsts = (*firsts, header.base_sequence)[-REFUSED_PER_PRODUCER:]
        self._refusals[key] = _Refusal(header.producer_epoch, firsts, error_code, now_ms)
        while len(self._refusals) > MAX_REFUSALS:
            self._refusals.popitem(last=False)

    def appended(self, tp: TopicPartition, producer_id: int) -> None:
        """The producer wrote to the partition: whatever it retried is in order again."""
        if self._refusals:
            self._refusals.pop((tp, producer_id), None)

    def behind_refusal(
        self, tp: TopicPartition, header: BatchHeader, next_sequence: int | None, now_ms: int
    ) -> ErrorCode | None:
        """The refusal error to answer `header`'s batch with, when it skips a batch of its
        producer refused just before: `next_sequence` is the sequence the partition's log
        expects of the producer at the batch's epoch (None when it knows no batch of it
        there, so any sequence would do: a batch behind a refused one would be written ahead
        of it). None for a batch no refusal is ahead of. Sequences that wrap past INT32_MAX
        are compared as they are: such a gap is answered as out of order, as Kafka does."""
        if not self._refusals:
            return None
        self._expire(now_ms)
        refusal = self._refusals.get((tp, header.producer_id))
        if refusal is None or refusal.producer_epoch != header.producer_epoch:
            return None
        if next_sequence is None:
            hole = min(refusal.first_sequences)
        elif next_sequence in refusal.first_sequences:
            hole = next_sequence
        else:
            return None
        return refusal.error_code if hole < header.base_sequence else None

    def _expire(self, now_ms: int) -> None:
        refusals = self._refusals
        while refusals:
            key, oldest = next(iter(refusals.items()))
            if now_ms - oldest.at_ms < self.window_ms:
                return
            del refusals[key]
