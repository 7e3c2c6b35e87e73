"""Size on disk of topics, partitions and log dirs, from each broker's DescribeLogDirs (what
kafka-log-dirs.sh shows), for the topic and broker pages of the API and the console."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from api import kafka
from api.kafka import BrokerUnavailable
from broker.client.errors import KafkaAdminError
from broker.client.models import LogDirDescription


class DiskUsage:
    """Every broker's log dirs at one moment, and the sizes derived from them. A partition's
    size is that of its largest replica: followers converge on the leader's log, and the
    largest is what a partition takes on a disk that holds it whole."""

    def __init__(self, log_dirs: dict[int, list[LogDirDescription]]) -> None:
        self.log_dirs = log_dirs
        self._partitions: dict[str, dict[int, int]] = defaultdict(dict)
        for dirs in log_dirs.values():
            for log_dir in dirs:
                for (topic, partition), replica in log_dir.replicas.items():
                    sizes = self._partitions[topic]
                    sizes[partition] = max(sizes.get(partition, 0), replica.size)

    def partition_sizes(self, topic: str) -> dict[int, int]:
        return dict(self._partitions.get(topic, {}))

    def topic_size(self, topic: str) -> int | None:
        sizes = self._partitions.get(topic)
        return sum(sizes.values()) if sizes else None

    def broker_log_dirs(self, node_id: int) -> list[dict] | None:
        """Each log dir of the broker: what its partitions take, and its volume's total, used
        and usable bytes (None where the broker does not say); None for a broker that was not
        asked (a fenced one)."""
        if node_id not in self.log_dirs:
            return None
        dirs = []
        for d in self.log_dirs[node_id]:
            known = d.total_bytes >= 0 and d.usable_bytes >= 0
            dirs.append(
                {
                    "path": d.path,
                    "size_bytes": sum(r.size for r in d.replicas.values()),
                    "partition_count": len(d.replicas),
                    "total_bytes": d.total_bytes if known else None,
                    "used_bytes": d.total_bytes - d.usable_bytes if known else None,
                    "usable_bytes": d.usable_bytes if known else None,
                }
            )
        return dirs


def disk_usage(brokers: Iterable[int] | None = None) -> DiskUsage | None:
    """Sizes are an extra on the pages that show them: None, and the sizes null, when the
    broker cannot say (the control plane's principal may not DESCRIBE the cluster, a broker is
    unreachable or slow), rather than failing the page or the call that wanted them. From
    `brokers` where the caller knows them, else from every broker Metadata lists."""
    try:
        return DiskUsage(kafka.call(lambda admin: admin.describe_log_dirs(brokers)))
    except (KafkaAdminError, BrokerUnavailable, TimeoutError):
        return None
