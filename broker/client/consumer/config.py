"""The consumer's options: the Java consumer's property names with dots as underscores, and
Kafka's defaults, checked at construction (see broker/client/options.py)."""

from __future__ import annotations

from typing import Any

from broker.client.consumer.assignors import ASSIGNORS, COOPERATIVE_STICKY, RANGE
from broker.client.options import (
    COMMON_OPTIONS,
    INT32_MAX,
    Option,
    boolean,
    choice,
    integer,
    optional,
    text,
)
from broker.client.record_decoder import ISOLATION_LEVELS

CLASSIC, CONSUMER = "classic", "consumer"
# Options of the classic protocol that the consumer protocol leaves to the broker.
CLASSIC_ONLY_OPTIONS = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "partition_assignment_strategy",
)


def assignor_names(value: Any) -> list[str]:
    """partition.assignment.strategy: names in order of preference, as a list or a
    comma-separated string."""
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names:
        raise ValueError(f"expected assignor names, got {value!r}")
    for name in names:
        if name not in ASSIGNORS:
            raise ValueError(f"{name!r} is not one of {', '.join(ASSIGNORS)}")
    return list(names)


CONSUMER_OPTIONS: dict[str, Option] = {
    **COMMON_OPTIONS,
    "group_id": Option(None, optional(text)),
    # None: "consumer" when the broker serves ConsumerGroupHeartbeat, else "classic".
    "group_protocol": Option(None, optional(choice(CLASSIC, CONSUMER))),
    "group_instance_id": Option(None, optional(text)),
    "group_remote_assignor": Option(None, optional(text)),
    "partition_assignment_strategy": Option([RANGE, COOPERATIVE_STICKY], assignor_names),
    "auto_offset_reset": Option("latest", choice("earliest", "latest", "none")),
    "enable_auto_commit": Option(True, boolean),
    "auto_commit_interval_ms": Option(5000, integer(0, INT32_MAX)),
    "isolation_level": Option("read_uncommitted", choice(*ISOLATION_LEVELS)),
    "session_timeout_ms": Option(45_000, integer(1, INT32_MAX)),
    "heartbeat_interval_ms": Option(3000, integer(1, INT32_MAX)),
    "max_poll_interval_ms": Option(300_000, integer(1, INT32_MAX)),
    "max_poll_records": Option(500, integer(1, INT32_MAX)),
    "fetch_min_bytes": Option(1, integer(0, INT32_MAX)),
    "fetch_max_wait_ms": Option(500, integer(0, INT32_MAX)),
    "fetch_max_bytes": Option(52_428_800, integer(0, INT32_MAX)),
    "max_partition_fetch_bytes": Option(1_048_576, integer(1, INT32_MAX)),
    "metadata_max_age_ms": Option(300_000, integer(0, INT32_MAX)),
    # Seed 002 (KIP-333): after a take-over, new records first and the backlog in parallel.
    "enable_parallel_rebalance": Option(False, boolean),
    "client_rack": Option("", lambda v: v if isinstance(v, str) else text(v)),
}
