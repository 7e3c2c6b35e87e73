"""All partition logs of a broker across its log.dirs (Kafka's LogManager)."""

from __future__ import annotations

import os
import resource
import shutil
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.storage.checkpoint import (
    CorruptCheckpointError,
    TopicPartition,
    fsync_directory,
    read_checkpoint,
    write_checkpoint,
)
from broker.storage.config import LogConfig
from broker.storage.log import Log, _now_ms

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# Kafka's ReplicaManager.HighWatermarkFilename: per log, its high watermark, which a
# replicated log starts from again after a restart.
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
# Kafka's LogCleanerManager.OFFSET_CHECKPOINT_FILE: per compacted log, the first dirty offset
# (where the last cleaning ended), so a restart does not clean everything again.
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
# File descriptors kept for connections and the rest when partitions are counted against
# `ulimit -n`: at least this many, at least a tenth of the limit.
FILE_DESCRIPTOR_RESERVE = 1024


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """`<topic>-<partition>`; topics may contain '-', so the partition follows the last one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(
        self, log_dirs: list[Path], *, high_watermark_follows_appends: bool = True
    ) -> None:
        """`high_watermark_follows_appends=False` for a broker in a cluster: its logs'
        high watermarks move with replication (Log.high_watermark_follows_appends) and start
        from the replication-offset-checkpoint when loaded."""
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.high_watermark_follows_appends = high_watermark_follows_appends
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._partitions_in: Counter[Path] = Counter()
        self._last_flush_ms: dict[TopicPartition, int] = {}
        self._checkpoint_lock = threading.Lock()
        self._cleaner_offsets: dict[TopicPartition, int] = {}
        # Kafka's LogCleanerManager states: the logs being cleaned, each with the flag that
        # asks its cleaning to stop, and the logs nobody may start cleaning (being deleted).
        self._cleaning_cond = threading.Condition()
        self._cleaning: dict[TopicPartition, threading.Event] = {}
        self._cleaning_paused: dict[TopicPartition, int] = {}

    def load(self, config_for: Callable[[str], LogConfig], *, now_ms: int | None = None) -> None:
        """Open every partition directory; without a clean-shutdown marker, logs recover
        from their checkpointed recovery points."""
        now = _now_ms() if now_ms is None else now_ms
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            try:
                recovery_points = read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            except CorruptCheckpointError:
                recovery_points, clean = {}, False  # recover everything rather than trust it
            try:
                start_offsets = read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            except CorruptCheckpointError:
                start_offsets = {}
            try:
                cleaner_offsets = read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
            except CorruptCheckpointError:
                cleaner_offsets = {}  # the cleaner starts over from each log start
            try:
                high_watermarks = read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            except CorruptCheckpointError:
                high_watermarks = {}  # replicated logs start at their log start offsets
            for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)  # a deletion cut short
                    continue
                if entry.name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                    continue
                tp = parse_log_dir_name(entry.name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise RuntimeError(f"duplicate log directories for {tp[0]}-{tp[1]}")
                self._logs[tp] = Log.open(
                    Path(entry.path),
                    config_for(tp[0]),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    clean_shutdown=clean,
                    now_ms=now,
                    high_watermark=high_watermarks.get(tp),
                    high_watermark_follows_appends=self.high_watermark_follows_appends,
                )
                self._dir_of[tp] = log_dir
                self._partitions_in[log_dir] += 1
                self._last_flush_ms[tp] = now
                if tp in cleaner_offsets:
                    self._cleaner_offsets[tp] = cleaner_offsets[tp]
            # From here on the directory holds unflushed writes until the next clean close.
            marker.unlink(missing_ok=True)

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def create(
        self, topic: str, partition: int, config: LogConfig, *, now_ms: int | None = None
    ) -> Log:
        """Get or create the log, placing a new one in the log dir with fewest partitions."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        now = _now_ms() if now_ms is None else now_ms
        # Counted once per creation of a whole topic would do; once per partition made creating
        # 10,000 partitions quadratic, so the counts are kept as partitions come and go.
        log_dir = min(self.log_dirs, key=lambda d: self._partitions_in[d])
        directory = log_dir / f"{topic}-{partition}"
        log = Log.open(
            directory,
            config,
            clean_shutdown=True,
            now_ms=now,
            high_watermark_follows_appends=self.high_watermark_follows_appends,
        )
        fsync_directory(log_dir)
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        self._partitions_in[log_dir] += 1
        self._last_flush_ms[tp] = now
        return log

    @property
    def partition_count(self) -> int:
        return sum(self._partitions_in.values())

    def partitions_openable(self) -> int:
        """How many more partitions this process can keep open: each holds its active
        segment's file, and sockets, index rolls and recovery need descriptors too. A broker
        out of descriptors can accept no connection, so creating past this refuses instead."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return sys.maxsize
        reserve = max(FILE_DESCRIPTOR_RESERVE, soft // 10)
        return max(0, soft - reserve - self.partition_count)

    def delete(self, topic: str, partition: int) -> None:
        """Rename to `<topic>-<partition>.<uuid>-delete` first, so a crash mid-removal leaves
        a directory that load() finishes deleting instead of reviving the partition."""
        tp = (topic, partition)
        self.abort_and_pause_cleaning(tp)
        try:
            log = self._logs.pop(tp, None)
            log_dir = self._dir_of.pop(tp, None)
            if log_dir is not None:
                self._partitions_in[log_dir] -= 1
            self._last_flush_ms.pop(tp, None)
            if log is None or log_dir is None:
                return
            doomed = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            log.leader_epochs.stop_checkpoints()
            os.rename(log.directory, doomed)
            fsync_directory(log_dir)
            log.directory = doomed
            log.delete()
            self.checkpoint()
            with self._checkpoint_lock:
                if self._cleaner_offsets.pop(tp, None) is not None:
                    self._write_cleaner_checkpoint(log_dir)
        finally:
            self.resume_cleaning(tp)

    def logs(self) -> Iterable[tuple[TopicPartition, Log]]:
        return list(self._logs.items())

    def logs_by_dir(self) -> dict[Path, list[tuple[TopicPartition, Log]]]:
        """Every log dir, in log.dirs order and empty ones too, with the logs it holds."""
        # Copies first: deletions run in threads, and a log deleted between the two copies is
        # left out rather than listed without a dir.
        dir_of, logs = dict(self._dir_of), list(self._logs.items())
        by_dir: dict[Path, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_dirs}
        for tp, log in logs:
            log_dir = dir_of.get(tp)
            if log_dir is not None:
                by_dir[log_dir].append((tp, log))
        return by_dir

    def checkpoint(self) -> None:
        """Write the recovery points, log start offsets and high watermarks of every log dir.
        Blocking (fsync): callers on the event loop run it in a thread."""
        self._checkpoint_dirs(self.log_dirs)

    def _checkpoint_dirs(self, log_dirs: Iterable[Path]) -> None:
        """The offsets are read under the lock, so a later call never writes older offsets
        than an earlier one."""
        with self._checkpoint_lock:
            logs, dir_of = list(self._logs.items()), dict(self._dir_of)
            for log_dir in log_dirs:
                members = [(tp, log) for tp, log in logs if dir_of.get(tp) == log_dir]
                write_checkpoint(
                    log_dir / RECOVERY_POINT_CHECKPOINT,
                    {tp: log.recovery_point for tp, log in members},
                )
                write_checkpoint(
                    log_dir / LOG_START_OFFSET_CHECKPOINT,
                    {tp: log.log_start_offset for tp, log in members},
                )
                write_checkpoint(
                    log_dir / REPLICATION_OFFSET_CHECKPOINT,
                    {tp: log.high_watermark for tp, log in members},
                )

    # ---- truncation (Kafka's LogManager.truncateTo, truncateFullyAndStartAt) ---------------

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Log.truncate_to for the follower's log of the partition (False when there is
        none), with its cleaning aborted and paused meanwhile if the cut reaches below the
        active segment, which is all the cleaner reads. The cleaner's checkpoint and the
        dir's offset checkpoints follow the log down. Blocking: run it off the loop."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is None:
            return False
        pause = offset < log.active_segment.base_offset
        if pause:
            self.abort_and_pause_cleaning(tp)
        try:
            truncated = log.truncate_to(offset)
            if pause:
                self._truncate_cleaner_offset(tp, log)
        finally:
            if pause:
                self.resume_cleaning(tp)
        if truncated:
            self._checkpoint_truncated(tp)
        return truncated

    def truncate_fully_and_start_at(self, topic: str, partition: int, offset: int) -> None:
        """Log.truncate_fully_and_start_at for the partition's log, if it has one, with its
        cleaning aborted and paused meanwhile; checkpoints follow as for truncate_to."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is None:
            return
        self.abort_and_pause_cleaning(tp)
        try:
            log.truncate_fully_and_start_at(offset)
            self._truncate_cleaner_offset(tp, log)
        finally:
            self.resume_cleaning(tp)
        self._checkpoint_truncated(tp)

    def _truncate_cleaner_offset(self, tp: TopicPartition, log: Log) -> None:
        """Kafka's maybeTruncateCheckpoint: the first dirty offset may not lie beyond the
        active segment of a truncated log, or the cleaner would skip records appended anew."""
        with self._checkpoint_lock:
            log_dir = self._dir_of.get(tp)
            first_dirty = self._cleaner_offsets.get(tp)
            active_base = log.active_segment.base_offset
            if log_dir is not None and first_dirty is not None and first_dirty > active_base:
                self._cleaner_offsets[tp] = active_base
                self._write_cleaner_checkpoint(log_dir)

    def _checkpoint_truncated(self, tp: TopicPartition) -> None:
        """Before the follower appends anew: a recovery point left above the cut on disk
        would let recovery after a power failure skip the new, unflushed records."""
        log_dir = self._dir_of.get(tp)
        if log_dir is not None:
            self._checkpoint_dirs([log_dir])

    # ---- the cleaner's bookkeeping (Kafka's LogCleanerManager) ------------------------------

    def cleaner_offsets(self) -> dict[TopicPartition, int]:
        """Per compacted log, the first dirty offset the last cleaning checkpointed."""
        with self._checkpoint_lock:
            return dict(self._cleaner_offsets)

    def update_cleaner_offset(self, tp: TopicPartition, offset: int) -> None:
        """Checkpoint `offset` as the log's first dirty offset. Blocking (fsync)."""
        with self._checkpoint_lock:
            log_dir = self._dir_of.get(tp)
            if log_dir is None:
                return  # deleted while it was being cleaned
            self._cleaner_offsets[tp] = offset
            self._write_cleaner_checkpoint(log_dir)

    def _write_cleaner_checkpoint(self, log_dir: Path) -> None:
        write_checkpoint(
            log_dir / CLEANER_OFFSET_CHECKPOINT,
            {tp: o for tp, o in self._cleaner_offsets.items() if self._dir_of.get(tp) == log_dir},
        )

    def begin_cleaning(self, tp: TopicPartition) -> threading.Event | None:
        """Mark the log as being cleaned; None when it already is or cleaning is paused.
        The returned event is set when the cleaning should stop (the log is going away)."""
        with self._cleaning_cond:
            if tp in self._cleaning or tp in self._cleaning_paused or tp not in self._logs:
                return None
            abort = self._cleaning[tp] = threading.Event()
            return abort

    def done_cleaning(self, tp: TopicPartition) -> None:
        with self._cleaning_cond:
            self._cleaning.pop(tp, None)
            self._cleaning_cond.notify_all()

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Stop any cleaning of the log and keep it from starting until resume_cleaning().
        Blocks until a cleaning in progress has let go of the log: call it off the loop."""
        with self._cleaning_cond:
            self._cleaning_paused[tp] = self._cleaning_paused.get(tp, 0) + 1
            abort = self._cleaning.get(tp)
            if abort is not None:
                abort.set()
            while tp in self._cleaning:
                self._cleaning_cond.wait()

    def resume_cleaning(self, tp: TopicPartition) -> None:
        with self._cleaning_cond:
            count = self._cleaning_paused.get(tp, 0) - 1
            if count > 0:
                self._cleaning_paused[tp] = count
            else:
                self._cleaning_paused.pop(tp, None)

    def flush_dirty(self, now_ms: int) -> int:
        """fsync logs whose flush.ms has elapsed, and segments rolled since their last flush.
        Blocking: run it off the event loop. Returns how many logs were fully flushed."""
        flushed = 0
        for tp, log in list(self._logs.items()):
            if now_ms - self._last_flush_ms.get(tp, now_ms) >= log.config.flush_interval_ms:
                log.flush()
                self._last_flush_ms[tp] = now_ms
                flushed += 1
            else:
                log.flush_rolled_segments()
        return flushed

    def enforce_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted. The caller
        checkpoints afterwards when any were (log start offsets moved)."""
        return sum(log.enforce_retention(now_ms) for _, log in list(self._logs.items()))

    def close(self) -> None:
        """Flush and close all logs, write checkpoints, then mark each dir cleanly shut down."""
        for log in list(self._logs.values()):
            log.close()
        self.checkpoint()
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b'{"version":0,"brokerEpoch":-1}')
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_directory(log_dir)
        self._logs.clear()
        self._dir_of.clear()
        self._partitions_in.clear()
