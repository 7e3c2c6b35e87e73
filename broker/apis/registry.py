"""Every API Fjord serves, with the version range it advertises in ApiVersions.

A range lists only versions whose semantics are implemented and covered by tests
(tests/broker/apis/test_api_versions_sweep.py and its siblings exercise every advertised version).
The group and transaction APIs are declared beside their handlers, each module's `SPECS`."""

from __future__ import annotations

from broker.apis import (
    acls,
    classic_groups,
    client_quotas,
    consumer_groups,
    group_offsets,
    legacy_fetch,
    legacy_produce,
    sasl,
    scram_credentials,
    transactions,
)
from broker.apis.api_versions import handle_api_versions
from broker.apis.base import ApiSpec, Handler
from broker.apis.cluster import handle_describe_cluster
from broker.apis.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker.apis.delete_records import handle_delete_records
from broker.apis.describe_topic_partitions import handle_describe_topic_partitions
from broker.apis.features import handle_update_features
from broker.apis.fetch import handle_fetch
from broker.apis.init_producer_id import handle_init_producer_id
from broker.apis.leadership import (
    handle_alter_partition_reassignments,
    handle_elect_leaders,
    handle_list_partition_reassignments,
)
from broker.apis.list_offsets import handle_list_offsets
from broker.apis.log_dirs import handle_describe_log_dirs
from broker.apis.metadata import handle_metadata
from broker.apis.offset_for_leader_epoch import handle_offset_for_leader_epoch
from broker.apis.produce import handle_produce
from broker.apis.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)


def _below(first_modern: int, legacy: Handler, modern: Handler) -> Handler:
    """Versions below `first_modern` (kio has no schema for them) go to their own handler."""

    def handle(broker, ctx, request):
        if ctx.api_version < first_modern:
            return legacy(broker, ctx, request)
        return modern(broker, ctx, request)

    return handle


API_SPECS: dict[int, ApiSpec] = {
    s.key: s
    for s in [
        # Produce v12 is transaction version 2 (partitions added implicitly, KIP-890 part 2),
        # v13 names topics by id. Produce v0-2, Fetch v0-3 and ListOffsets v0 (gone from
        # Kafka 4) serve old clients: magic 0/1 message sets are converted to and from the v2
        # batches on disk.
        ApiSpec(0, "Produce", 0, 13, _below(3, legacy_produce.handle, handle_produce)),
        ApiSpec(1, "Fetch", 0, 18, _below(4, legacy_fetch.handle, handle_fetch)),
        # ListOffsets v8, v9 and v11 add tiered-storage specs (answered as Kafka does without
        # remote storage), v10 a timeout for remote look-ups.
        ApiSpec(
            2,
            "ListOffsets",
            0,
            11,
            _below(1, legacy_fetch.handle_list_offsets_v0, handle_list_offsets),
        ),
        ApiSpec(3, "Metadata", 0, 13, handle_metadata),
        ApiSpec(18, "ApiVersions", 0, 4, handle_api_versions),
        ApiSpec(19, "CreateTopics", 2, 7, handle_create_topics),
        ApiSpec(20, "DeleteTopics", 1, 6, handle_delete_topics),
        ApiSpec(21, "DeleteRecords", 0, 2, handle_delete_records),
        # InitProducerId v6 is KIP-939's two-phase commit.
        ApiSpec(22, "InitProducerId", 0, 6, handle_init_producer_id),
        ApiSpec(23, "OffsetForLeaderEpoch", 2, 4, handle_offset_for_leader_epoch),
        ApiSpec(32, "DescribeConfigs", 1, 4, handle_describe_configs),
        ApiSpec(33, "AlterConfigs", 0, 2, handle_alter_configs),
        ApiSpec(35, "DescribeLogDirs", 1, 4, handle_describe_log_dirs),
        ApiSpec(37, "CreatePartitions", 0, 3, handle_create_partitions),
        ApiSpec(43, "ElectLeaders", 0, 2, handle_elect_leaders),
        ApiSpec(44, "IncrementalAlterConfigs", 0, 1, handle_incremental_alter_configs),
        ApiSpec(45, "AlterPartitionReassignments", 0, 1, handle_alter_partition_reassignments),
        ApiSpec(46, "ListPartitionReassignments", 0, 0, handle_list_partition_reassignments),
        ApiSpec(57, "UpdateFeatures", 0, 2, handle_update_features),
        ApiSpec(60, "DescribeCluster", 0, 2, handle_describe_cluster),
        ApiSpec(75, "DescribeTopicPartitions", 0, 0, handle_describe_topic_partitions),
        *group_offsets.SPECS,
        *classic_groups.SPECS,
        *consumer_groups.SPECS,
        *transactions.SPECS,
        *acls.SPECS,
        *sasl.SPECS,
        *scram_credentials.SPECS,
        *client_quotas.SPECS,
    ]
}

CONSUMER_PROTOCOL_APIS = frozenset(s.key for s in consumer_groups.SPECS)
