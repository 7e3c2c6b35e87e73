"""DescribeLogDirs: each log dir's partitions and their sizes; DESCRIBE on the cluster."""

from __future__ import annotations

import os
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation

UNKNOWN_BYTES = -1


async def handle_describe_log_dirs(broker, ctx: RequestContext, request) -> object:
    if not authorize_cluster(broker, ctx, AclOperation.DESCRIBE):
        # Below v3 the response has no error code: the client only sees no log dirs.
        return ctx.response(
            "DescribeLogDirsResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    wanted = (
        None
        if request.topics is None
        else {(t.topic, p) for t in request.topics for p in t.partitions}
    )
    by_dir = broker.log_manager.logs_by_dir()
    # statvfs can hang on a network file system: not on the event loop.
    volumes = await broker.run_blocking(_volumes, list(by_dir))
    results = []
    for log_dir, logs in by_dir.items():
        partitions: dict[str, list[object]] = {}
        # Partitions and topics this broker does not have are left out, as Kafka does, rather
        # than answered with an error.
        for (topic, partition), log in sorted(logs, key=lambda entry: entry[0]):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            partitions.setdefault(topic, []).append(
                ctx.response(
                    "DescribeLogDirsPartition",
                    partition_index=partition,
                    partition_size=log.size_in_bytes,
                    # Kafka's lag of a current log is max(HW - LEO, 0), never above 0; only a
                    # future log (AlterReplicaLogDirs, not served) can lag.
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        total_bytes, usable_bytes = volumes[log_dir]
        results.append(
            ctx.response(
                "DescribeLogDirsResult",
                error_code=ErrorCode.none,
                log_dir=str(log_dir.absolute()),
                topics=tuple(
                    ctx.response("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
                    for name, parts in partitions.items()
                ),
                total_bytes=total_bytes,
                usable_bytes=usable_bytes,
            )
        )
    return ctx.response(
        "DescribeLogDirsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=tuple(results),
    )


def _volumes(log_dirs: list[Path]) -> dict[Path, tuple[int, int]]:
    """Total and usable bytes of the file system holding each dir, as Java's FileStore counts
    them (usable: the blocks an unprivileged process may still take)."""
    volumes = {}
    for log_dir in log_dirs:
        try:
            st = os.statvfs(log_dir)
        except OSError:
            volumes[log_dir] = (UNKNOWN_BYTES, UNKNOWN_BYTES)
        else:
            volumes[log_dir] = (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)
    return volumes
