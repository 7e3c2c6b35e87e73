"""Where a read of Kafka starts and ends: offsets per partition in Spark's checkpoint form, the
driver-side look-ups that resolve `earliest`, `latest` and timestamps into offsets, and the
split of a micro-batch into the ranges Spark's tasks read (as Spark's Kafka connector plans
them: KafkaOffsetRangeCalculator, KafkaMicroBatchStream.rateLimit)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyspark.sql.datasource import InputPartition

from broker.client.admin import AdminClient
from broker.client.admin_topics import EARLIEST as LIST_EARLIEST
from broker.client.admin_topics import LATEST as LIST_LATEST
from broker.client.admin_topics import READ_COMMITTED, READ_UNCOMMITTED
from broker.client.models import TopicPartition
from pipelines.spark import clients
from pipelines.spark.options import (
    EARLIEST,
    LATEST,
    ClientOptions,
    OffsetSpec,
    SourceOptions,
    TimestampSpec,
)

T = TypeVar("T")
Offsets = dict[TopicPartition, int]


class DataLossError(RuntimeError):
    """Offsets a query was to read are gone (deleted by retention, or the topic recreated);
    raised under failOnDataLoss=true, as Spark's Kafka source does."""


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's checkpoint form: {"topic": {"0": 23}}, partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {
        TopicPartition(topic, int(p)): int(offset)
        for topic, partitions in offsets.items()
        for p, offset in partitions.items()
    }


def blocking(client: ClientOptions, work: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run `work` with the process' admin client, from Spark's synchronous calls on the driver
    (whose source lives in one Python process for the whole query: its connections too)."""
    return clients.run(clients.admin_call(client, work))  # type: ignore[arg-type]


class OffsetReader:
    """The driver's questions to Kafka for one query: which partitions, at which offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.isolation = READ_COMMITTED if options.read_committed else READ_UNCOMMITTED

    def partitions(self) -> list[TopicPartition]:
        return blocking(self.options.client, self._partitions)

    async def _partitions(self, admin: AdminClient) -> list[TopicPartition]:
        subscription = self.options.subscription
        if subscription.partitions:
            return sorted(TopicPartition(*tp) for tp in subscription.partitions)
        listed = await admin.list_topics()
        return sorted(
            TopicPartition(t.name, p)
            for t in listed
            if subscription.matches(t.name)
            for p in range(t.partition_count)
        )

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list(list(tps), LIST_EARLIEST)

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        """High watermarks, or last stable offsets under read_committed."""
        return self._list(list(tps), LIST_LATEST)

    def _list(self, tps: list[TopicPartition], timestamp: int) -> Offsets:
        if not tps:
            return {}
        return blocking(self.options.client, lambda admin: self._listed(admin, timestamp, tps))

    async def _listed(
        self, admin: AdminClient, timestamp: int, tps: list[TopicPartition]
    ) -> Offsets:
        if not tps:
            return {}
        found = await admin.list_offsets(tps, timestamp, self.isolation)
        return {TopicPartition(*tp): offset for tp, offset in found.items()}

    def resolve(
        self, spec: OffsetSpec | TimestampSpec, tps: list[TopicPartition], option: str
    ) -> Offsets:
        """Offsets for `tps` as `spec` (the option named `option`) says."""
        return blocking(self.options.client, lambda admin: self._resolve(admin, spec, tps, option))

    async def _resolve(
        self,
        admin: AdminClient,
        spec: OffsetSpec | TimestampSpec,
        tps: list[TopicPartition],
        option: str,
    ) -> Offsets:
        def listed(timestamp: int, which: list[TopicPartition]) -> Awaitable[Offsets]:
            return self._listed(admin, timestamp, which)

        if spec == "earliest":
            return await listed(LIST_EARLIEST, tps)
        if spec == "latest":
            return await listed(LIST_LATEST, tps)
        if isinstance(spec, dict):
            missing = [tp for tp in tps if tuple(tp) not in spec]
            if missing:
                raise ValueError(
                    f"{option} names no offset for {_name(missing[0])}: give every partition "
                    f"one (-2 for earliest, -1 for latest)"
                )
            wanted = {tp: spec[tuple(tp)] for tp in tps}
            found = await listed(LIST_EARLIEST, [tp for tp, o in wanted.items() if o == EARLIEST])
            found |= await listed(LIST_LATEST, [tp for tp, o in wanted.items() if o == LATEST])
            return {tp: found.get(tp, offset) for tp, offset in wanted.items()}
        assert isinstance(spec, TimestampSpec)
        found = {}
        for tp in tps:
            timestamp = spec.timestamp_for(tp)
            if timestamp is None:
                raise ValueError(f"{option} names no timestamp for {_name(tp)}")
            [offset] = (await listed(timestamp, [tp])).values()
            if offset < 0:  # every record is older
                if spec.strategy == "error":
                    raise ValueError(
                        f"{option}: no record of {_name(tp)} has a timestamp at or after "
                        f"{timestamp} (startingOffsetsByTimestampStrategy=latest reads from "
                        f"the end instead)"
                    )
                [offset] = (await listed(LIST_LATEST, [tp])).values()
            found[tp] = offset
        return found


def _name(tp: TopicPartition | tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """What one Spark task reads: [from_offset, until_offset) of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def plan_ranges(start: Offsets, end: Offsets, min_partitions: int | None) -> list[OffsetRange]:
    """One range a partition with records to read; with minPartitions more than that, the
    larger ranges split (in proportion to their size, each into at least one) so that Spark
    runs about that many tasks."""
    ranges = [
        OffsetRange(tp.topic, tp.partition, start.get(tp, 0), until)
        for tp, until in sorted(end.items())
        if until > start.get(tp, 0)
    ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    split = []
    for r in ranges:
        parts = max(1, round(r.size / total * min_partitions))
        bounds = [r.from_offset + r.size * i // parts for i in range(parts + 1)]
        split += [
            OffsetRange(r.topic, r.partition, low, high)
            for low, high in zip(bounds, bounds[1:], strict=False)
            if high > low
        ]
    return split


def rate_limit(start: Offsets, end: Offsets, max_records: int) -> Offsets:
    """End offsets for reading at most `max_records` records past `start`, shared among
    partitions in proportion to what each has to read; none is starved (a share below one
    record rounds up). Spark's Kafka source floors every share, so that what the floors leave
    spills into a micro-batch of a few records of its own; here the records the floors leave go
    to the largest remainders, and a limit that divides the backlog gives full batches."""
    lags = {tp: until - start.get(tp, 0) for tp, until in end.items()}
    total = sum(lag for lag in lags.values() if lag > 0)
    if total <= max_records:
        return dict(end)
    steps: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, TopicPartition]] = []
    for tp, lag in lags.items():
        if lag <= 0:
            continue
        share = max_records * lag / total
        steps[tp] = math.ceil(share) if share < 1 else math.floor(share)
        if steps[tp] < lag:
            remainders.append((share - steps[tp], tp))
    left = max_records - sum(steps.values())
    for _, tp in sorted(remainders, key=lambda r: (-r[0], r[1]))[: max(left, 0)]:
        steps[tp] += 1
    return {tp: start.get(tp, 0) + steps[tp] if tp in steps else until for tp, until in end.items()}


def check_no_data_loss(
    start: Offsets, earliest: Offsets, latest: Offsets, fail_on_data_loss: bool
) -> Offsets:
    """`start`, moved up to where each partition's log now starts (records deleted by
    retention) and kept at most at its end (a truncated or recreated partition); raises
    DataLossError instead under failOnDataLoss=true."""
    checked = {}
    for tp, offset in start.items():
        low, high = earliest.get(tp, offset), latest.get(tp, offset)
        if offset < low or offset > high:
            if fail_on_data_loss:
                raise DataLossError(
                    f"partition {_name(tp)}: offset {offset} is no longer in the log (which "
                    f"now holds [{low}, {high})); some data may have been lost. Set "
                    f"failOnDataLoss=false to go on from the log's start"
                )
            offset = min(max(offset, low), high)
        checked[tp] = offset
    return checked


def missing_partitions(
    known: Iterable[TopicPartition], current: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """Partitions a query read that are gone (their topic deleted)."""
    now = set(current)
    return [tp for tp in known if tp not in now]
