"""Feature flags (KIP-584/KIP-778) through the protocol: what ApiVersions v3+ shows of them,
UpdateFeatures' checks and errors (Kafka's FeatureControlManager), group.version switching the
consumer group protocol's APIs, and finalized levels that survive a restart."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_consumer_groups_api import join

from broker.apis.registry import CONSUMER_PROTOCOL_APIS

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
FAILED = "The update failed for all features since the following feature had an error: "
INVALID = ErrorCode.invalid_update_version


def api_versions(v=4):
    return req(
        18,
        v,
        "ApiVersionsRequest",
        client_software_name="fjord-test",
        client_software_version="1",
    )


def update_features(*updates, v=1, validate_only=False):
    """updates: (feature, level, upgrade type) triples; v0 sends allow_downgrade instead."""
    keys = tuple(
        req(
            57,
            v,
            "FeatureUpdateKey",
            feature=name,
            max_version_level=level,
            upgrade_type=upgrade,
            allow_downgrade=upgrade != UPGRADE,
        )
        for name, level, upgrade in updates
    )
    return req(
        57,
        v,
        "UpdateFeaturesRequest",
        timeout=ms(60000),
        feature_updates=keys,
        validate_only=validate_only,
    )


async def features(conn, v=4):
    """(supported {name: (min, max)}, finalized {name: level}, epoch, advertised API keys)."""
    response = await conn.send(api_versions(v))
    assert response.error_code == ErrorCode.none
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {}
    for f in response.finalized_features:
        assert f.min_version_level == f.max_version_level
        finalized[f.name] = f.max_version_level
    keys = {k.api_key for k in response.api_keys}
    return supported, finalized, response.finalized_features_epoch, keys


# Kafka 4.x's bootstrap levels: transaction.version 2 (KIP-890's transactions v2) included.
DEFAULTS = {"metadata.version": 30, "transaction.version": 2, "group.version": 1}


async def test_api_versions_shows_kafka_4_3_features(broker_client):
    supported, finalized, epoch, keys = await features(broker_client)
    assert supported == {
        "metadata.version": (30, 30),
        "transaction.version": (0, 2),
        "group.version": (0, 1),
    }
    assert finalized == DEFAULTS
    assert epoch == 0
    assert CONSUMER_PROTOCOL_APIS <= keys
    # v3 leaves out the supported features whose minimum is 0 (KAFKA-17492), not the finalized.
    supported, finalized, epoch, _ = await features(broker_client, v=3)
    assert supported == {"metadata.version": (30, 30)}
    assert finalized == DEFAULTS
    assert epoch == 0


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (("no.such.feature", 1, UPGRADE), "Local controller {node} does not support this feature."),
        (("no.such.feature", 0, UPGRADE), "Feature no.such.feature not found."),
        (("transaction.version", 3, UPGRADE), "Local controller {node} only supports versions 0-2"),
        (
            ("metadata.version", 29, UNSAFE_DOWNGRADE),
            "Local controller {node} only supports versions 30",
        ),
        (("group.version", -1, SAFE_DOWNGRADE), "A feature version cannot be less than 0."),
        (
            ("group.version", 0, UPGRADE),
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade.",
        ),
        (("group.version", 0, 9), "The controller does not support the given upgrade type."),
    ],
)
async def test_refused_updates(broker, broker_client, update, reason):
    response = await broker_client.send(update_features(update))
    assert response.error_code == INVALID
    name, level, _ = update
    expected = f"Invalid update version {level} for feature {name}. " + reason
    assert response.error_message == FAILED + expected.format(node=broker.node_id)
    assert response.results == ()
    assert (await features(broker_client))[1:3] == (DEFAULTS, 0)


async def test_one_refused_update_fails_them_all(broker_client):
    response = await broker_client.send(
        update_features(("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 3, UPGRADE))
    )
    assert response.error_code == INVALID
    assert "feature transaction.version" in response.error_message
    assert (await features(broker_client))[1:3] == (DEFAULTS, 0)


async def test_upgrade_and_downgrade_types(broker_client):
    down = await broker_client.send(update_features(("transaction.version", 0, SAFE_DOWNGRADE)))
    assert (down.error_code, down.error_message) == (ErrorCode.none, None)
    assert [(r.feature, r.error_code, r.error_message) for r in down.results] == [
        ("transaction.version", ErrorCode.none, None)
    ]
    _, finalized, epoch, _ = await features(broker_client)
    # A feature at level 0 is left out of the finalized features.
    assert finalized == {"metadata.version": 30, "group.version": 1}
    assert epoch == 1
    newer = await broker_client.send(update_features(("transaction.version", 1, UNSAFE_DOWNGRADE)))
    assert newer.error_code == INVALID
    assert newer.error_message.endswith("Can't downgrade to a newer version.")
    # The current level with any upgrade type is accepted, and is an update (the epoch moves).
    same = await broker_client.send(update_features(("transaction.version", 0, UNSAFE_DOWNGRADE)))
    assert same.error_code == ErrorCode.none
    up = await broker_client.send(
        update_features(("transaction.version", 2, UPGRADE), ("metadata.version", 30, UPGRADE))
    )
    assert up.error_code == ErrorCode.none
    assert {r.feature for r in up.results} == {"transaction.version", "metadata.version"}
    assert (await features(broker_client))[1:3] == (DEFAULTS, 3)
    # No updates at all: nothing is written, the epoch stays.
    assert (await broker_client.send(update_features())).error_code == ErrorCode.none
    assert (await features(broker_client))[2] == 3


async def test_v0_allow_downgrade_and_v2_without_results(broker_client):
    refused = await broker_client.send(update_features(("group.version", 0, UPGRADE), v=0))
    assert refused.error_code == INVALID
    allowed = await broker_client.send(update_features(("group.version", 0, SAFE_DOWNGRADE), v=0))
    assert allowed.error_code == ErrorCode.none
    assert [r.feature for r in allowed.results] == ["group.version"]
    v2 = await broker_client.send(update_features(("group.version", 1, UPGRADE), v=2))
    assert (v2.error_code, v2.error_message) == (ErrorCode.none, None)
    assert not hasattr(v2, "results")
    assert (await features(broker_client))[1:3] == (DEFAULTS, 2)


async def test_validate_only_changes_nothing(broker_client):
    response = await broker_client.send(
        update_features(
            ("group.version", 0, SAFE_DOWNGRADE),
            ("transaction.version", 0, UNSAFE_DOWNGRADE),
            validate_only=True,
        )
    )
    assert response.error_code == ErrorCode.none
    assert [r.feature for r in response.results] == ["group.version", "transaction.version"]
    _, finalized, epoch, keys = await features(broker_client)
    assert (finalized, epoch) == (DEFAULTS, 0)
    assert CONSUMER_PROTOCOL_APIS <= keys
    # A refused update is refused under validate_only too.
    refused = await broker_client.send(
        update_features(("group.version", 2, UPGRADE), validate_only=True)
    )
    assert refused.error_code == INVALID


async def test_group_version_switches_the_consumer_protocol(tmp_path):
    async with running_broker(tmp_path / "kafka-logs") as (broker, conn):
        await broker.create_topic("orders", 1, {})
        down = await conn.send(update_features(("group.version", 0, SAFE_DOWNGRADE)))
        assert down.error_code == ErrorCode.none
        _, finalized, _, keys = await features(conn)
        assert "group.version" not in finalized
        assert not CONSUMER_PROTOCOL_APIS & keys
        assert not broker.consumer_protocol_enabled
        up = await conn.send(update_features(("group.version", 1, UPGRADE)))
        assert up.error_code == ErrorCode.none
        _, finalized, _, keys = await features(conn)
        assert finalized["group.version"] == 1
        assert CONSUMER_PROTOCOL_APIS <= keys
        joined = await conn.send(join(1, "member-1", "features-group"))
        assert joined.error_code == ErrorCode.none
        assert joined.member_epoch >= 1


async def test_group_version_cannot_enable_a_protocol_the_config_leaves_out(tmp_path):
    """Kafka needs both: "consumer" in group.coordinator.rebalance.protocols and
    group.version >= 1."""
    log_dir = tmp_path / "kafka-logs"
    async with running_broker(log_dir, group_coordinator_rebalance_protocols="classic") as (
        broker,
        conn,
    ):
        _, finalized, _, keys = await features(conn)
        assert finalized["group.version"] == 1
        assert not CONSUMER_PROTOCOL_APIS & keys
        assert not broker.consumer_protocol_enabled


async def test_finalized_levels_and_epoch_survive_a_restart(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    async with running_broker(log_dir) as (_, conn):
        for update in (
            ("transaction.version", 0, SAFE_DOWNGRADE),
            ("group.version", 0, UNSAFE_DOWNGRADE),
        ):
            assert (await conn.send(update_features(update))).error_code == ErrorCode.none
    async with running_broker(log_dir) as (broker, conn):
        _, finalized, epoch, keys = await features(conn)
        assert (finalized, epoch) == ({"metadata.version": 30}, 2)
        assert not CONSUMER_PROTOCOL_APIS & keys
        assert broker.features.levels == {
            "metadata.version": 30,
            "transaction.version": 0,
            "group.version": 0,
        }
        assert (await conn.send(update_features(("group.version", 1, UPGRADE)))).error_code == (
            ErrorCode.none
        )
    async with running_broker(log_dir) as (_, conn):
        _, finalized, epoch, keys = await features(conn)
        assert (finalized, epoch) == ({"metadata.version": 30, "group.version": 1}, 3)
        assert CONSUMER_PROTOCOL_APIS <= keys
