"""Fixtures of the cluster tests: clusters of broker processes on a throwaway PostgreSQL
database (tests/cluster/harness.py), torn down after the test whatever happened."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from harness import Cluster, postgres_answers, skip_unless_cluster_mode


@pytest.fixture
def postgres() -> None:
    if not postgres_answers():
        pytest.skip("nothing answers on 127.0.0.1:5432 (tests/services.sh up starts one)")


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
    """make_cluster for the tests of cluster mode itself (issue 16). Until it lands they skip:
    the broker either refuses metadata.store.url as an unknown setting, or accepts it and
    goes on alone with its embedded store, creating none of the cluster's tables."""

    def make(size: int = 3, overrides: Sequence[str] = (), network: str = "auto") -> Cluster:
        skip_unless_cluster_mode()
        cluster = make_cluster(size, overrides, network)
        skip_unless_cluster_mode(cluster)
        return cluster

    return make
