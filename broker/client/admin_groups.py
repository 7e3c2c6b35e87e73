"""Consumer groups and their offsets, as kafka-consumer-groups asks for them: both classic
groups (DescribeGroups) and KIP-848 consumer groups (ConsumerGroupDescribe)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.constants import EntityType

from broker.client.admin_topics import LATEST, TopicOperations
from broker.client.cluster import GROUP_KEY
from broker.client.errors import KafkaAdminError, check
from broker.client.group_offsets import (
    committed_offsets,
    offset_commit_request,
    offset_fetch_request,
)
from broker.client.models import (
    ConsumerGroupMember,
    GroupDescription,
    GroupListing,
    OffsetAndMetadata,
    PartitionLag,
    TopicPartition,
)

DESCRIBE_GROUPS, LIST_GROUPS = 15, 16
DELETE_GROUPS, CONSUMER_GROUP_DESCRIBE = 42, 69


@cache
def _embedded_reader(schema: str, class_name: str) -> Any:
    # v0's layout is a prefix of every later version's: reading at v0 ignores what follows.
    module = load_entity_module(schema, 0, EntityType.data)
    return entity_reader(getattr(module, class_name))


def _assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions in a classic consumer's ConsumerProtocolAssignment (version first)."""
    if not data:
        return []
    read = _embedded_reader("consumer_protocol_assignment", "ConsumerProtocolAssignment")
    assignment, _ = read(data, 2)
    return sorted((tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions)


def _subscription(data: bytes | None) -> list[str]:
    if not data:
        return []
    read = _embedded_reader("consumer_protocol_subscription", "ConsumerProtocolSubscription")
    subscription, _ = read(data, 2)
    return sorted(subscription.topics)


class GroupOperations(TopicOperations):
    async def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[GroupListing]:
        """Groups of every broker, filtered by state (Stable, Empty, ...) and type (classic,
        consumer) when given."""

        async def attempt() -> list[GroupListing]:
            responses = await self.send_to_every_node(
                LIST_GROUPS,
                "ListGroupsRequest",
                states_filter=tuple(states),
                types_filter=tuple(types),
            )
            return sorted(
                (
                    GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type)
                    for response in responses.values()
                    for g in response.groups
                ),
                key=lambda g: g.group_id,
            )

        return await self.retrying(attempt)

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer group as ConsumerGroupDescribe sees it, else a classic group as
        DescribeGroups does (Kafka's AdminClient falls back the same way);
        GROUP_ID_NOT_FOUND for a group that does not exist."""

        async def attempt() -> GroupDescription:
            session = await self.coordinator(GROUP_KEY, group_id)
            if CONSUMER_GROUP_DESCRIBE in session.broker_versions:
                response = await session.send(
                    session.request(
                        CONSUMER_GROUP_DESCRIBE,
                        "ConsumerGroupDescribeRequest",
                        group_ids=(group_id,),
                        include_authorized_operations=False,
                    )
                )
                group = response.groups[0]
                if group.error_code != ErrorCode.group_id_not_found:
                    check(group.error_code, group.error_message, group_id)
                    return _consumer_group(group)
            response = await session.send(
                session.request(
                    DESCRIBE_GROUPS,
                    "DescribeGroupsRequest",
                    groups=(group_id,),
                    include_authorized_operations=False,
                )
            )
            group = response.groups[0]
            check(group.error_code, group.error_message, group_id)
            if group.group_state == "Dead":
                raise KafkaAdminError.from_code(
                    ErrorCode.group_id_not_found, f"Group {group_id} not found.", group_id
                )
            return _classic_group(group)

        return await self.retrying(attempt)

    async def list_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (only partitions it committed for)."""

        async def attempt() -> dict[TopicPartition, int]:
            session = await self.coordinator(GROUP_KEY, group_id)
            response = await session.send(offset_fetch_request(session, group_id))
            return {tp: om.offset for tp, om in committed_offsets(response, group_id).items()}

        return await self.retrying(attempt)

    async def group_lag(self, group_id: str) -> list[PartitionLag]:
        """Per committed partition: the high watermark less the committed offset."""
        committed = await self.list_group_offsets(group_id)
        high_watermarks = await self.list_offsets(committed, LATEST)
        return [
            PartitionLag(t, p, offset, high_watermarks[(t, p)], high_watermarks[(t, p)] - offset)
            for (t, p), offset in sorted(committed.items())
        ]

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Commit offsets for a group with no active members as Kafka's AdminClient does:
        generation -1 and no member id, which a group with members refuses."""
        committed = {TopicPartition(*tp): OffsetAndMetadata(o) for tp, o in offsets.items()}

        async def attempt() -> None:
            session = await self.coordinator(GROUP_KEY, group_id)
            response = await session.send(offset_commit_request(session, group_id, committed))
            for t in response.topics:
                for p in t.partitions:
                    check(p.error_code, None, f"{t.name}-{p.partition_index}")

        await self.retrying(attempt)

    async def reset_group_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """kafka-consumer-groups --reset-offsets: to EARLIEST, LATEST or the first offset at or
        after a timestamp in milliseconds (the high watermark when there is none)."""
        offsets = await self.list_offsets(partitions, timestamp)
        missing = [tp for tp, offset in offsets.items() if offset < 0]
        offsets.update(await self.list_offsets(missing, LATEST))
        await self.alter_group_offsets(group_id, offsets)
        return offsets

    async def delete_groups(self, group_ids: Sequence[str]) -> None:
        """GROUP_NOT_EMPTY for a group with members."""
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> None:
                session = await self.coordinator(GROUP_KEY, group_id)
                response = await session.send(
                    session.request(DELETE_GROUPS, "DeleteGroupsRequest", groups_names=(group_id,))
                )
                for r in response.results:
                    check(r.error_code, None, r.group_id)

            await self.retrying(attempt)


def _classic_group(group: Any) -> GroupDescription:
    consumer = group.protocol_type == "consumer"
    return GroupDescription(
        group_id=group.group_id,
        group_type="classic",
        state=group.group_state,
        protocol_type=group.protocol_type,
        protocol=group.protocol_data or None,
        members=[
            ConsumerGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                assignment=_assignment(m.member_assignment) if consumer else [],
                subscribed_topics=_subscription(m.member_metadata) if consumer else [],
            )
            for m in group.members
        ],
    )


def _consumer_group(group: Any) -> GroupDescription:
    return GroupDescription(
        group_id=group.group_id,
        group_type="consumer",
        state=group.group_state,
        protocol_type="consumer",
        protocol=group.assignor_name,
        group_epoch=group.group_epoch,
        members=[
            ConsumerGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_epoch=m.member_epoch,
                assignment=sorted(
                    (tp.topic_name, p)
                    for tp in m.assignment.topic_partitions
                    for p in tp.partitions
                ),
                subscribed_topics=sorted(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
            )
            for m in group.members
        ],
    )
