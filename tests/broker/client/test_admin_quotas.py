"""The AdminClient's client quota operations against a real in-process broker: entities with
defaults and combinations, describe filters, removal, validate_only, and the broker's
refusals as KafkaAdminError naming the entity."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
from kio.schema.errors import ErrorCode

from broker.client import AdminClient
from broker.client.errors import KafkaAdminError
from broker.client.models import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
)

USER, CLIENT_ID, IP = ClientQuotaEntity.USER, ClientQuotaEntity.CLIENT_ID, ClientQuotaEntity.IP
Component = ClientQuotaFilterComponent


@pytest.fixture
async def admin(tmp_path):
    async with running_broker(tmp_path / "kafka-logs") as (broker, _):
        host, port = broker.bound["PLAINTEXT"]
        async with AdminClient(f"{host}:{port}") as client:
            yield client


def entity(**names: str | None) -> ClientQuotaEntity:
    return ClientQuotaEntity({t.replace("_", "-"): n for t, n in names.items()})


async def test_set_describe_and_remove_quotas_of_every_kind_of_entity(admin):
    alice = entity(user="alice")
    alice_app = entity(user="alice", client_id="app")
    alice_default_client = entity(user="alice", client_id=None)
    default_user = entity(user=None)
    app = entity(client_id="app")
    default_ip = entity(ip=None)
    await admin.alter_client_quotas(
        [
            ClientQuotaAlteration(alice, {"producer_byte_rate": 1024, "request_percentage": 12.5}),
            ClientQuotaAlteration(alice_app, {"consumer_byte_rate": 2048}),
            ClientQuotaAlteration(alice_default_client, {"controller_mutation_rate": 0.5}),
            ClientQuotaAlteration(default_user, {"producer_byte_rate": 4096}),
            ClientQuotaAlteration(app, {"consumer_byte_rate": 100}),
            ClientQuotaAlteration(default_ip, {"connection_creation_rate": 30}),
        ]
    )

    everything = await admin.describe_client_quotas()
    assert everything == {
        alice: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        alice_app: {"consumer_byte_rate": 2048.0},
        alice_default_client: {"controller_mutation_rate": 0.5},
        default_user: {"producer_byte_rate": 4096.0},
        app: {"consumer_byte_rate": 100.0},
        default_ip: {"connection_creation_rate": 30.0},
    }
    # A name matches that entity, with any other type unless strict.
    named = await admin.describe_client_quotas([Component.of_entity(USER, "alice")])
    assert set(named) == {alice, alice_app, alice_default_client}
    strict = await admin.describe_client_quotas([Component.of_entity(USER, "alice")], strict=True)
    assert set(strict) == {alice}
    defaults = await admin.describe_client_quotas([Component.of_default_entity(CLIENT_ID)])
    assert set(defaults) == {alice_default_client}
    any_client = await admin.describe_client_quotas([Component.of_entity_type(CLIENT_ID)])
    assert set(any_client) == {alice_app, alice_default_client, app}
    ips = await admin.describe_client_quotas([Component.of_entity_type(IP)], strict=True)
    assert set(ips) == {default_ip}

    # None removes a key; the others stay, and an entity without any is gone.
    await admin.alter_client_quotas(
        [
            ClientQuotaAlteration(alice, {"request_percentage": None, "producer_byte_rate": 512}),
            ClientQuotaAlteration(app, {"consumer_byte_rate": None}),
        ]
    )
    after = await admin.describe_client_quotas()
    assert after[alice] == {"producer_byte_rate": 512.0}
    assert app not in after


async def test_validate_only_changes_nothing(admin):
    bob = entity(user="bob")

    await admin.alter_client_quotas(
        [ClientQuotaAlteration(bob, {"producer_byte_rate": 1000})], validate_only=True
    )

    assert await admin.describe_client_quotas() == {}
    with pytest.raises(KafkaAdminError) as refused:
        await admin.alter_client_quotas(
            [ClientQuotaAlteration(bob, {"producer_byte_rate": 1.5})], validate_only=True
        )
    assert refused.value.code == ErrorCode.invalid_request


CAROL = entity(user="carol")


@pytest.mark.parametrize(
    "alteration, message, resource",
    [
        (ClientQuotaAlteration(CAROL, {"producer_byte_rate": 10.5}), "fractional", "user=carol"),
        (ClientQuotaAlteration(CAROL, {"no_such_key": 1}), "no_such_key", "user=carol"),
        (ClientQuotaAlteration(CAROL, {"consumer_byte_rate": 0}), "greater", "user=carol"),
        (
            ClientQuotaAlteration(entity(ip="10.0.0.1", user="carol"), {"x": 1}),
            "IP entity",
            "ip=10.0.0.1,user=carol",
        ),
        (
            ClientQuotaAlteration(entity(ip=None), {"producer_byte_rate": 1}),
            "producer_byte_rate",
            "ip=<default>",
        ),
    ],
)
async def test_refusals_name_the_entity(admin, alteration, message, resource):
    with pytest.raises(KafkaAdminError) as refused:
        await admin.alter_client_quotas([alteration])

    error = refused.value
    assert (error.code, error.name) == (ErrorCode.invalid_request, "INVALID_REQUEST")
    assert message in error.message
    assert error.resource == resource
    assert await admin.describe_client_quotas() == {}


async def test_quotas_need_cluster_configs_permissions(tmp_path):
    async with running_broker(
        tmp_path / "kafka-logs",
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ) as (broker, _):
        host, port = broker.bound["PLAINTEXT"]
        async with AdminClient(f"{host}:{port}") as admin:
            for call in (
                admin.describe_client_quotas(),
                admin.alter_client_quotas(
                    [ClientQuotaAlteration(entity(user="x"), {"producer_byte_rate": 1})]
                ),
            ):
                with pytest.raises(KafkaAdminError) as refused:
                    await call
                assert refused.value.name == "CLUSTER_AUTHORIZATION_FAILED"
