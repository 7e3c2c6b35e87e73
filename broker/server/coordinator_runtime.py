"""Runs the group coordinator's state machine on the event loop (see coordinator/runtime.py).

An operation's records are appended to the group's partition of `__consumer_offsets` as one
batch (a single write, so an operation is all-or-nothing after a crash), replayed into the
state machine, and only then is the operation's response released. Timers become one loop
timer armed at the earliest deadline. At start-up every partition is replayed from its log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.records import decode_record, encode_record
from broker.coordinator.runtime import Deferred, Record, Result
from broker.records.batch import build_batch, decode_batch, iter_batches, read_header

log = logging.getLogger("broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20
# A partition is compacted once its log is this much larger than its live state last was, so
# start-up replay stays proportional to the live state (general log compaction comes later).
COMPACTION_MIN_BYTES = 16 << 20
COMPACTION_GROWTH = 2
SNAPSHOT_BATCH_RECORDS = 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorRuntime:
    def __init__(self, broker, coordinator: GroupCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self._timer_handle: asyncio.TimerHandle | None = None
        self._create_lock = asyncio.Lock()
        self._snapshot_bytes: dict[int, int] = {}  # partition -> size after its last compaction
        coordinator.timer.on_change = self._arm_timer

    # -- start-up ------------------------------------------------------------------------------

    def load(self) -> int:
        """Replay `__consumer_offsets` into the coordinator; returns the records replayed."""
        replayed = 0
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        if topic is not None:
            for partition in range(topic.partitions):
                log_ = self.broker.replica_manager.log(OFFSETS_TOPIC, partition)
                for record in _read_records(log_):
                    self.coordinator.replay(record)
                    replayed += 1
        self.coordinator.on_loaded(_now_ms())
        self._arm_timer()
        return replayed

    async def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use, as Kafka does."""
        if self.broker.image.topic(OFFSETS_TOPIC) is not None:
            return
        async with self._create_lock:
            config = self.coordinator.config
            await self.broker.create_topic(
                OFFSETS_TOPIC,
                config.offsets_topic_partitions,
                # Never deleted by time or size: the coordinator compacts it itself.
                {
                    "retention.ms": "-1",
                    "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"]),
                },
            )

    # -- operations ----------------------------------------------------------------------------

    async def run(self, group_id: str, op: Callable[[int], Result]):
        """Run `op` for `group_id`: append and replay its records, then answer."""
        await self.ensure_offsets_topic()
        result = op(_now_ms())
        self.apply(result.records)
        response = result.response
        if isinstance(response, Deferred):
            future = asyncio.get_running_loop().create_future()
            response.add_callback(lambda value: future.done() or future.set_result(value))
            return await future
        return response

    def apply(self, records: list[Record]) -> None:
        """Append `records` (one batch per partition, in order) and replay them."""
        if not records:
            return
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for record in records:
            by_partition[self.coordinator.partition_for(record.key.group_id)].append(record)
        now_ms = _now_ms()
        for partition, group_records in by_partition.items():
            self._append(partition, group_records, now_ms)
        for record in records:
            self.coordinator.replay(record)
        for partition in by_partition:
            self._maybe_compact(partition, now_ms)

    def _append(self, partition: int, records: list[Record], now_ms: int) -> None:
        log_ = self.broker.replica_manager.log(OFFSETS_TOPIC, partition)
        batch = build_batch([(*encode_record(r), [], now_ms) for r in records])
        log_.append(
            batch,
            read_header(batch),
            now_ms=now_ms,
            leader_epoch=self.broker.replica_manager.leader_epoch,
        )

    def _maybe_compact(self, partition: int, now_ms: int) -> None:
        """Restate the partition's live state in a fresh segment and drop everything older.
        A crash midway leaves old records followed by (part of) the restatement: replay gives
        the same state either way."""
        log_ = self.broker.replica_manager.log(OFFSETS_TOPIC, partition)
        limit = max(
            COMPACTION_MIN_BYTES, COMPACTION_GROWTH * self._snapshot_bytes.get(partition, 0)
        )
        if log_.size_in_bytes < limit:
            return
        log_.roll(now_ms)
        start = log_.log_end_offset
        live = self.coordinator.snapshot_records(partition)
        for i in range(0, len(live), SNAPSHOT_BATCH_RECORDS):
            self._append(partition, live[i : i + SNAPSHOT_BATCH_RECORDS], now_ms)
        log_.delete_records_before(start)
        self._snapshot_bytes[partition] = log_.size_in_bytes
        log.info("compacted %s-%d: %d live record(s)", OFFSETS_TOPIC, partition, len(live))

    # -- timers --------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.coordinator.timer.next_deadline()
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - _now_ms()) / 1000)
        self._timer_handle = loop.call_later(delay, self._fire_timers)

    def _fire_timers(self) -> None:
        self._timer_handle = None
        now_ms = _now_ms()
        for key, task in self.coordinator.timer.expire(now_ms):
            try:
                self.apply(task(now_ms))
            except Exception:
                log.exception("coordinator timer %s failed", key)
        self._arm_timer()

    def stop(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None


def _read_records(log_):
    """Every record of a coordinator partition, in offset order."""
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, READ_CHUNK)
        if not data.size:
            break
        buf = b"".join(bytes(c) for c in data.records)
        for pos, header in iter_batches(buf):
            _, records = decode_batch(buf[pos : pos + header.size])
            for r in records:
                yield decode_record(r.key, r.value)
            offset = header.next_offset
