"""The group coordinator's settings as typed values, from the broker's properties."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    classic_max_size: int = 2**31 - 1
    consumer_session_timeout_ms: int = 45000
    consumer_min_session_timeout_ms: int = 45000
    consumer_max_session_timeout_ms: int = 60000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_min_heartbeat_interval_ms: int = 5000
    consumer_max_heartbeat_interval_ms: int = 15000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    migration_policy: str = "bidirectional"
    offsets_topic_partitions: int = 50
    offsets_retention_ms: int = 10080 * 60_000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096

    @classmethod
    def from_broker(cls, config) -> GroupCoordinatorConfig:
        c = config
        return cls(
            min_session_timeout_ms=c["group.min.session.timeout.ms"],
            max_session_timeout_ms=c["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=c["group.initial.rebalance.delay.ms"],
            classic_max_size=c["group.max.size"],
            consumer_session_timeout_ms=c["group.consumer.session.timeout.ms"],
            consumer_min_session_timeout_ms=c["group.consumer.min.session.timeout.ms"],
            consumer_max_session_timeout_ms=c["group.consumer.max.session.timeout.ms"],
            consumer_heartbeat_interval_ms=c["group.consumer.heartbeat.interval.ms"],
            consumer_min_heartbeat_interval_ms=c["group.consumer.min.heartbeat.interval.ms"],
            consumer_max_heartbeat_interval_ms=c["group.consumer.max.heartbeat.interval.ms"],
            consumer_max_size=c["group.consumer.max.size"],
            consumer_assignors=tuple(c["group.consumer.assignors"]),
            rebalance_protocols=tuple(c["group.coordinator.rebalance.protocols"]),
            migration_policy=c["group.consumer.migration.policy"],
            offsets_topic_partitions=c["offsets.topic.num.partitions"],
            offsets_retention_ms=c["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=c["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=c["offset.metadata.max.bytes"],
        )
