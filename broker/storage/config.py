"""Per-log settings, named after Kafka's topic configs (segment.bytes -> segment_bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

LONG_MAX = (1 << 63) - 1


@cache
def magic_of_version(version: str) -> int:
    """The record format of a Kafka release string ("0.10.2-IV0", "2.8", "3.0-IV1"); raises
    ValueError for what is not one."""
    parts = version.split("-", 1)[0].split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts) or len(parts) > 4:
        raise ValueError(f"{version!r} is not a Kafka version")
    major, minor = int(parts[0]), int(parts[1])
    if major == 0 and minor < 10:
        return 0
    if major == 0 and minor < 11:
        return 1
    return 2


@dataclass(slots=True, frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    cleanup_policy: str = "delete"  # "delete", "compact" or both, comma-separated
    file_delete_delay_ms: int = 60000
    max_message_bytes: int = 1048588
    preallocate: bool = False
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    message_format_version: str = "3.0-IV1"

    @property
    def message_format_magic(self) -> int:
        """The magic the log writes (seed 004): 0 before 0.10.0, 1 before 0.11.0, else 2."""
        return magic_of_version(self.message_format_version)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def flushes_by_count(self) -> bool:
        """flush.messages is set: acks of appends that reach it wait for fsync."""
        return self.flush_interval_messages < LONG_MAX

    @property
    def max_index_entries(self) -> int:
        # Kafka sizes index files from segment.index.bytes; each offset entry is 8 bytes.
        return max(1, self.segment_index_bytes // 8)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """Kafka's LogConfig.maxSegmentMs: a compacted log also rolls by max.compaction.lag.ms,
        since the cleaner never touches the active segment."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms
