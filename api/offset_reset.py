"""kafka-consumer-groups --reset-offsets, shared by the groups API (one call) and the
reset job (partitions in steps): where each partition goes, and the rule that only a group
without active members may be moved."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker.client import AdminClient, KafkaAdminError
from broker.client.admin_topics import EARLIEST, LATEST
from broker.client.models import TopicPartition

INACTIVE_STATES = {"Empty", "Dead"}


async def ensure_inactive(admin: AdminClient, group_id: str) -> None:
    """NON_EMPTY_GROUP unless the group is unknown, empty or dead: a live consumer would
    overwrite the reset with its next commit."""
    try:
        group = await admin.describe_group(group_id)
    except KafkaAdminError as e:
        if e.code != ErrorCode.group_id_not_found:
            raise
        return
    if group.state not in INACTIVE_STATES or group.members:
        raise KafkaAdminError.from_code(
            ErrorCode.non_empty_group,
            f"Offsets can only be reset when the group is inactive; it is {group.state} "
            f"with {len(group.members)} member(s).",
            group_id,
        )


async def target_offsets(
    admin: AdminClient, partitions: Sequence[TopicPartition], to: str, value: int | None = None
) -> dict[TopicPartition, int]:
    """The offset of each partition for a reset to "earliest", "latest", a "timestamp" in ms
    (the high watermark where no record is that recent) or an "offset"."""
    if to == "earliest":
        return await admin.list_offsets(partitions, EARLIEST)
    if to == "latest":
        return await admin.list_offsets(partitions, LATEST)
    if to == "timestamp":
        offsets = await admin.list_offsets(partitions, value)
        missing = [tp for tp, offset in offsets.items() if offset < 0]
        offsets.update(await admin.list_offsets(missing, LATEST) if missing else {})
        return offsets
    # An offset outside the log would be reset again by the consumer's auto.offset.reset:
    # clamp it to [log start, high watermark] as kafka-consumer-groups does.
    low = await admin.list_offsets(partitions, EARLIEST)
    high = await admin.list_offsets(partitions, LATEST)
    return {tp: min(max(value, low[tp]), high[tp]) for tp in partitions}
