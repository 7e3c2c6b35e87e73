"""A broker refuses partitions it could not keep open (one file each) with INVALID_PARTITIONS,
instead of running out of descriptors and refusing every connection after."""

from __future__ import annotations

import os
import resource

import pytest
from in_process_broker import running_broker

from broker.client import AdminClient, KafkaAdminError
from broker.client.models import NewTopic


@pytest.fixture
def low_file_limit():
    """A soft `ulimit -n` leaving room for some dozens of partitions past the reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield lambda partitions: resource.setrlimit(
        resource.RLIMIT_NOFILE,
        (max(1024 + 40 + partitions, len(os.listdir("/proc/self/fd")) + 200), hard),
    )
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_partitions_past_the_file_limit_are_refused_and_the_broker_goes_on(
    tmp_path, low_file_limit
):
    async with running_broker(tmp_path / "logs") as (broker, _):
        host, port = broker.bound["PLAINTEXT"]
        async with AdminClient(f"{host}:{port}") as admin:
            low_file_limit(broker.log_manager.partition_count)
            openable = broker.log_manager.partitions_openable()
            assert 5 < openable < 10_000

            with pytest.raises(KafkaAdminError) as refused:
                await admin.create_topics([NewTopic("too-wide", openable + 1)])
            assert refused.value.name == "INVALID_PARTITIONS"
            assert "open-file limit" in refused.value.message
            assert "too-wide" not in [t.name for t in await admin.list_topics()]

            await admin.create_topics([NewTopic("fits", 2)])
            with pytest.raises(KafkaAdminError) as grown:
                await admin.create_partitions({"fits": openable + 1})
            assert grown.value.name == "INVALID_PARTITIONS"
            (fits,) = await admin.describe_topics(["fits"])
            assert len(fits.partitions) == 2
            assert broker.log_manager.partitions_openable() == openable - 2

        # New connections are still accepted.
        async with AdminClient(f"{host}:{port}") as again:
            assert "fits" in [t.name for t in await again.list_topics()]
