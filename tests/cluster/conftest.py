"""Fixtures of the cluster tests: clusters of broker processes on a throwaway PostgreSQL
database (tests/cluster/harness.py), torn down after the test whatever happened."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from harness import Cluster, assert_formed, netns_unsupported
from postgres_database import skip_without_postgres


@pytest.fixture
def postgres() -> None:
    skip_without_postgres()


@pytest.fixture
def netns() -> None:
    reason = netns_unsupported()
    if reason:
        pytest.skip(f"no network namespaces here: {reason}")


@pytest.fixture
def make_cluster(tmp_path, postgres):
    """Start a Cluster; every one started is closed after the test, and what its brokers
    printed last is in the test's captured output (shown when it fails)."""
    clusters: list[Cluster] = []

    def make(size: int = 3, overrides: Sequence[str] = (), network: str = "auto") -> Cluster:
        cluster = Cluster(tmp_path / f"cluster-{len(clusters)}", size, overrides, network)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        print(cluster.logs())
        cluster.close()


@pytest.fixture
def make_formed_cluster(make_cluster):
    """make_cluster, and the brokers must have formed the cluster in its database."""

    def make(size: int = 3, overrides: Sequence[str] = (), network: str = "auto") -> Cluster:
        cluster = make_cluster(size, overrides, network)
        assert_formed(cluster)
        return cluster

    return make
