"""Topics, partitions, offsets, records, configs and the cluster, as kafka-topics,
kafka-configs and kafka-delete-records ask for them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.cluster import ClusterClient
from broker.client.errors import KafkaAdminError, check
from broker.client.models import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResourceType,
    CreatedTopic,
    LogDirDescription,
    NewTopic,
    Node,
    PartitionDescription,
    ReplicaInfo,
    TopicDescription,
    TopicListing,
    TopicPartition,
)
from broker.client.session import Session

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS = 32, 35, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 44, 60

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class TopicOperations(ClusterClient):
    async def describe_cluster(self, include_fenced_brokers: bool = False) -> ClusterDescription:
        """The cluster id, the controller and the brokers; fenced ones too (flagged) when asked,
        which takes DescribeCluster v2 (KIP-1073)."""

        async def attempt() -> ClusterDescription:
            session = await self.any_session()
            response = await session.send(
                session.request(
                    DESCRIBE_CLUSTER,
                    "DescribeClusterRequest",
                    include_cluster_authorized_operations=False,
                    endpoint_type=1,  # brokers
                    include_fenced_brokers=include_fenced_brokers,
                )
            )
            check(response.error_code, response.error_message)
            await self.metadata()
            brokers = list(self.nodes.values())
            if include_fenced_brokers:
                brokers = [
                    Node(b.broker_id, b.host, b.port, b.rack, getattr(b, "is_fenced", False))
                    for b in response.brokers
                ]
            return ClusterDescription(
                cluster_id=response.cluster_id,
                controller_id=response.controller_id,
                brokers=brokers,
            )

        return await self.retrying(attempt)

    async def list_topics(self, include_internal: bool = False) -> list[TopicListing]:
        response = await self.retrying(lambda: self.metadata(None))
        return sorted(
            (
                TopicListing(t.name, t.topic_id, t.is_internal, len(t.partitions))
                for t in response.topics
                if t.error_code == ErrorCode.none and (include_internal or not t.is_internal)
            ),
            key=lambda t: t.name,
        )

    async def describe_topics(self, names: Sequence[str]) -> list[TopicDescription]:
        """Partitions with leader, replicas, log start offset, high watermark and last stable
        offset; UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""

        async def attempt() -> Any:
            response = await self.metadata(names)
            for t in response.topics:
                check(t.error_code, None, t.name)
            return response

        response = await self.retrying(attempt)
        # An offline partition has no leader to ask: its offsets are unknown (-1), and the
        # others are still described.
        partitions = [
            (t.name, p.partition_index)
            for t in response.topics
            for p in t.partitions
            if p.leader_id >= 0
        ]
        log_start = await self.list_offsets(partitions, EARLIEST)
        high_watermark = await self.list_offsets(partitions, LATEST)
        lso = await self.list_offsets(partitions, LATEST, READ_COMMITTED)
        return [
            TopicDescription(
                name=t.name,
                topic_id=t.topic_id,
                is_internal=t.is_internal,
                partitions=[
                    PartitionDescription(
                        partition=p.partition_index,
                        leader=p.leader_id,
                        leader_epoch=p.leader_epoch,
                        replicas=list(p.replica_nodes),
                        isr=list(p.isr_nodes),
                        log_start_offset=log_start.get((t.name, p.partition_index), -1),
                        high_watermark=high_watermark.get((t.name, p.partition_index), -1),
                        last_stable_offset=lso.get((t.name, p.partition_index), -1),
                        offline_replicas=list(getattr(p, "offline_replicas", ())),
                    )
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)
                ],
            )
            for t in response.topics
        ]

    async def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = set(partitions)
        response = await self.metadata(sorted({t for t, _ in wanted}))
        leaders = {}
        for t in response.topics:
            check(t.error_code, None, t.name)
            for p in t.partitions:
                if (t.name, p.partition_index) in wanted:
                    check(p.error_code, None, f"{t.name}-{p.partition_index}")
                    leaders[(t.name, p.partition_index)] = p.leader_id
        for missing in wanted - leaders.keys():
            raise KafkaAdminError.from_code(
                ErrorCode.unknown_topic_or_partition, None, f"{missing[0]}-{missing[1]}"
            )
        return leaders

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        timestamp: int = LATEST,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> dict[TopicPartition, int]:
        """The offset for `timestamp` (EARLIEST, LATEST or milliseconds) of each partition,
        asked of its leader; -1 where a timestamp is past the last record."""
        partitions = list(partitions)
        if not partitions:
            return {}

        async def attempt() -> dict[TopicPartition, int]:
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            # Leaders are looked up on every attempt: NOT_LEADER_OR_FOLLOWER means one moved.
            routes = await self._leaders(partitions)
            for tp in partitions:
                by_leader[routes[tp]].append(tp)
            offsets = {}
            for leader, tps in by_leader.items():
                offsets.update(await self.list_offsets_at(leader, tps, timestamp, isolation_level))
            return offsets

        return await self.retrying(attempt)

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool = False
    ) -> list[CreatedTopic]:
        """All or the first error: a KafkaAdminError naming the topic it concerns (topics
        before it in the same request are created unless validate_only)."""

        async def attempt() -> list[CreatedTopic]:
            session = await self.controller()
            creatable = tuple(
                session.request(
                    CREATE_TOPICS,
                    "CreatableTopic",
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments=(),
                    configs=tuple(
                        session.request(CREATE_TOPICS, "CreatableTopicConfig", name=k, value=v)
                        for k, v in t.configs.items()
                    ),
                )
                for t in topics
            )
            response = await session.send(
                session.request(
                    CREATE_TOPICS,
                    "CreateTopicsRequest",
                    topics=creatable,
                    timeout=timedelta(milliseconds=self.request_timeout_ms),
                    validate_only=validate_only,
                )
            )
            for r in response.topics:
                check(r.error_code, r.error_message, r.name)
            return [
                CreatedTopic(r.name, r.topic_id, r.num_partitions, r.replication_factor)
                for r in response.topics
            ]

        return await self.retrying(attempt)

    async def delete_topics(self, names: Sequence[str]) -> None:
        async def attempt() -> None:
            session = await self.controller()
            # v6 names topics in DeleteTopicState entries (which may carry ids instead).
            states = (
                tuple(
                    session.request(DELETE_TOPICS, "DeleteTopicState", name=n, topic_id=None)
                    for n in names
                )
                if session.version(DELETE_TOPICS) >= 6
                else ()
            )
            response = await session.send(
                session.request(
                    DELETE_TOPICS,
                    "DeleteTopicsRequest",
                    topics=states,
                    topic_names=tuple(names),
                    timeout=timedelta(milliseconds=self.request_timeout_ms),
                )
            )
            for r in response.responses:
                check(r.error_code, r.error_message, r.name)

        await self.retrying(attempt)

    async def create_partitions(
        self, total_counts: Mapping[str, int], validate_only: bool = False
    ) -> None:
        """Grow each topic to that many partitions in total."""

        async def attempt() -> None:
            session = await self.controller()
            response = await session.send(
                session.request(
                    CREATE_PARTITIONS,
                    "CreatePartitionsRequest",
                    topics=tuple(
                        session.request(
                            CREATE_PARTITIONS,
                            "CreatePartitionsTopic",
                            name=name,
                            count=count,
                            assignments=None,
                        )
                        for name, count in total_counts.items()
                    ),
                    timeout=timedelta(milliseconds=self.request_timeout_ms),
                    validate_only=validate_only,
                )
            )
            for r in response.results:
                check(r.error_code, r.error_message, r.name)

        await self.retrying(attempt)

    async def delete_records(
        self, before_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Move each partition's log start up to the offset (-1: its high watermark); returns
        the new low watermarks."""

        async def attempt() -> dict[TopicPartition, int]:
            leaders = await self._leaders(before_offsets)
            by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
                lambda: defaultdict(list)
            )
            for (topic, partition), offset in before_offsets.items():
                by_leader[leaders[(topic, partition)]][topic].append((partition, offset))
            low_watermarks = {}
            for leader, topics in by_leader.items():
                session = await self.session(leader)
                response = await session.send(
                    session.request(
                        DELETE_RECORDS,
                        "DeleteRecordsRequest",
                        topics=tuple(
                            session.request(
                                DELETE_RECORDS,
                                "DeleteRecordsTopic",
                                name=topic,
                                partitions=tuple(
                                    session.request(
                                        DELETE_RECORDS,
                                        "DeleteRecordsPartition",
                                        partition_index=p,
                                        offset=o,
                                    )
                                    for p, o in partitions
                                ),
                            )
                            for topic, partitions in topics.items()
                        ),
                        timeout=timedelta(milliseconds=self.request_timeout_ms),
                    )
                )
                for t in response.topics:
                    for p in t.partitions:
                        check(p.error_code, None, f"{t.name}-{p.partition_index}")
                        low_watermarks[(t.name, p.partition_index)] = p.low_watermark
            return low_watermarks

        return await self.retrying(attempt)

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None
    ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log dirs (every broker of the cluster by default), with the size of
        every partition replica they hold, as kafka-log-dirs.sh lists them."""

        def described(response) -> list[LogDirDescription]:
            check(getattr(response, "error_code", ErrorCode.none), None)
            return [
                LogDirDescription(
                    result.log_dir,
                    {
                        TopicPartition(t.name, p.partition_index): ReplicaInfo(
                            p.partition_size, p.offset_lag, p.is_future_key
                        )
                        for t in result.topics
                        for p in t.partitions
                    },
                    getattr(result, "total_bytes", -1),
                    getattr(result, "usable_bytes", -1),
                )
                for result in response.results
                if result.error_code == ErrorCode.none
            ]

        async def attempt() -> dict[int, list[LogDirDescription]]:
            responses = await self.send_to_every_node(
                DESCRIBE_LOG_DIRS, "DescribeLogDirsRequest", brokers, topics=None
            )
            return {node: described(response) for node, response in responses.items()}

        return await self.retrying(attempt)

    async def _config_session(self, resource_type: ConfigResourceType, name: str) -> Session:
        # A broker's own configs are answered by that broker; the rest by any.
        if resource_type == ConfigResourceType.BROKER and name:
            return await self.session(int(name))
        return await self.any_session()

    async def describe_configs(
        self, resource_type: ConfigResourceType, name: str, keys: Sequence[str] | None = None
    ) -> list[ConfigEntry]:
        """Every config of a topic, a broker (by node id) or a group, with its source."""

        async def attempt() -> list[ConfigEntry]:
            session = await self._config_session(resource_type, name)
            response = await session.send(
                session.request(
                    DESCRIBE_CONFIGS,
                    "DescribeConfigsRequest",
                    resources=(
                        session.request(
                            DESCRIBE_CONFIGS,
                            "DescribeConfigsResource",
                            resource_type=resource_type,
                            resource_name=name,
                            configuration_keys=tuple(keys) if keys is not None else None,
                        ),
                    ),
                    include_synonyms=False,
                    include_documentation=False,
                )
            )
            result = response.results[0]
            check(result.error_code, result.error_message, name)
            return [
                ConfigEntry(c.name, c.value, c.config_source, c.read_only, c.is_sensitive)
                for c in result.configs
            ]

        return await self.retrying(attempt)

    async def incremental_alter_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        ops: Sequence[AlterConfigOp],
        validate_only: bool = False,
    ) -> None:
        """SET, DELETE (back to the default), APPEND or SUBTRACT (list configs) each named
        config; a broker's name is its node id, "" for the cluster-wide default."""

        async def attempt() -> None:
            session = await self._config_session(resource_type, name)
            response = await session.send(
                session.request(
                    INCREMENTAL_ALTER_CONFIGS,
                    "IncrementalAlterConfigsRequest",
                    resources=(
                        session.request(
                            INCREMENTAL_ALTER_CONFIGS,
                            "AlterConfigsResource",
                            resource_type=resource_type,
                            resource_name=name,
                            configs=tuple(
                                session.request(
                                    INCREMENTAL_ALTER_CONFIGS,
                                    "AlterableConfig",
                                    name=op.name,
                                    config_operation=op.op,
                                    value=op.value,
                                )
                                for op in ops
                            ),
                        ),
                    ),
                    validate_only=validate_only,
                )
            )
            for r in response.responses:
                check(r.error_code, r.error_message, r.resource_name)

        await self.retrying(attempt)
