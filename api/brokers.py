"""The cluster's brokers as the Brokers pages of the API and the console show them: alive or
fenced (DescribeCluster v2), which one is the controller, how many partitions each leads and
holds a replica of (Metadata, over the topics the control plane may describe), and their log
dirs with sizes (DescribeLogDirs, which fenced brokers are not asked)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api import kafka
from api.disk_usage import disk_usage
from broker.client import AdminClient
from broker.client.models import ClusterDescription, Node


@dataclass(frozen=True)
class BrokerState:
    node: Node
    controller: bool
    partitions_led: int
    # Partitions with a replica on it (Kafka's PartitionCount).
    partition_count: int
    # None where the broker was not asked or did not say (fenced, unreachable, not allowed).
    log_dirs: list[dict] | None

    @property
    def size_bytes(self) -> int | None:
        """What its partition replicas take on disk, all log dirs."""
        if self.log_dirs is None:
            return None
        return sum(d["size_bytes"] for d in self.log_dirs)


@dataclass(frozen=True)
class ClusterOverview:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerState]

    def broker(self, node_id: int) -> BrokerState | None:
        return next((b for b in self.brokers if b.node.node_id == node_id), None)


@dataclass(frozen=True)
class _Described:
    cluster: ClusterDescription
    led: Counter[int]
    hosted: Counter[int]


async def _describe(admin: AdminClient) -> _Described:
    cluster, metadata = await asyncio.gather(
        admin.describe_cluster(include_fenced_brokers=True),
        admin.retrying(lambda: admin.metadata(None)),
    )
    led: Counter[int] = Counter()
    hosted: Counter[int] = Counter()
    for topic in metadata.topics:
        for partition in topic.partitions:
            led[partition.leader_id] += 1
            hosted.update(partition.replica_nodes)
    return _Described(cluster, led, hosted)


def cluster_overview(
    call: Callable[[Any], Any] = kafka.call, *, log_dirs: bool = True
) -> ClusterOverview:
    """The overview through `call` (kafka.call, or the console's broker_call, which turns a
    failure into a message on the page); its errors are call's. Without `log_dirs`, no
    broker is asked for its log dirs (each broker's answer lists every replica it holds)."""
    described: _Described = call(_describe)
    cluster = described.cluster
    alive = [node.node_id for node in cluster.brokers if not node.fenced]
    usage = disk_usage(alive) if log_dirs else None
    return ClusterOverview(
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        brokers=[
            BrokerState(
                node=node,
                controller=node.node_id == cluster.controller_id,
                partitions_led=described.led[node.node_id],
                partition_count=described.hosted[node.node_id],
                log_dirs=usage.broker_log_dirs(node.node_id) if usage is not None else None,
            )
            for node in sorted(cluster.brokers, key=lambda n: n.node_id)
        ],
    )
