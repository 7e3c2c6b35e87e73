"""OffsetCommit and OffsetFetch as the admin client and the consumer send them: one builder
for each, whoever commits (a member fenced by its generation or member epoch, or an admin
with generation -1 and no member id); the committed topics are built alike for the
producer's TxnOffsetCommit."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from broker.client.errors import check
from broker.client.models import OffsetAndMetadata, TopicPartition
from broker.client.session import Session

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
T = TypeVar("T")


def by_topic(items: Iterable[tuple[TopicPartition, T]]) -> dict[str, list[tuple[int, T]]]:
    """Per-partition values grouped by topic, in order, as requests list them."""
    topics: dict[str, list[tuple[int, T]]] = defaultdict(list)
    for (topic, partition), value in sorted(items):
        topics[topic].append((partition, value))
    return topics


def committed_topics(
    session: Session, api_key: int, prefix: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> tuple:
    """The topics of an OffsetCommit or a TxnOffsetCommit (`prefix` names their entity
    classes, whose fields are the same)."""
    return tuple(
        session.request(
            api_key,
            f"{prefix}Topic",
            name=topic,
            partitions=tuple(
                session.request(
                    api_key,
                    f"{prefix}Partition",
                    partition_index=p,
                    committed_offset=om.offset,
                    committed_leader_epoch=om.leader_epoch,
                    committed_metadata=om.metadata,
                )
                for p, om in partitions
            ),
        )
        for topic, partitions in by_topic(offsets.items()).items()
    )


def offset_commit_request(
    session: Session,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    *,
    generation: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> Any:
    return session.request(
        OFFSET_COMMIT,
        "OffsetCommitRequest",
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=group_instance_id,
        retention_time_ms=-1,
        topics=committed_topics(session, OFFSET_COMMIT, "OffsetCommitRequest", offsets),
    )


def offset_fetch_request(
    session: Session, group_id: str, partitions: Iterable[TopicPartition] | None = None
) -> Any:
    """The group's committed offsets for `partitions`, or for every partition (None)."""
    topics = None
    if partitions is not None:
        topics = tuple(
            session.request(
                OFFSET_FETCH,
                "OffsetFetchRequestTopics",
                name=topic,
                partition_indexes=tuple(p for p, _ in ps),
            )
            for topic, ps in by_topic((tp, None) for tp in partitions).items()
        )
    return session.request(
        OFFSET_FETCH,
        "OffsetFetchRequest",
        groups=(
            session.request(
                OFFSET_FETCH,
                "OffsetFetchRequestGroup",
                group_id=group_id,
                member_id=None,
                member_epoch=-1,
                topics=topics,
            ),
        ),
        require_stable=True,
    )


def committed_offsets(response: Any, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
    """An OffsetFetch answer: the partitions with a committed offset; Kafka's errors raised."""
    group = response.groups[0]
    check(group.error_code, None, group_id)
    found = {}
    for t in group.topics:
        for p in t.partitions:
            check(p.error_code, None, f"{t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                found[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "", p.committed_leader_epoch
                )
    return found
