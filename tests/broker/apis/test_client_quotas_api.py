"""DescribeClientQuotas and AlterClientQuotas through the raw protocol: Kafka's validation
messages, defaults and combinations, describe filters, validate_only, and quotas surviving a
restart."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode

EXACT, DEFAULT, ANY = 0, 1, 2


def entity(**names) -> tuple:
    return tuple(
        alter_v1.EntityData(entity_type=t.replace("_", "-"), entity_name=n)
        for t, n in names.items()
    )


def entry(ent: tuple, remove=(), **values) -> alter_v1.EntryData:
    ops = [alter_v1.OpData(key=k, value=float(v), remove=False) for k, v in values.items()]
    ops += [alter_v1.OpData(key=k, value=0.0, remove=True) for k in remove]
    return alter_v1.EntryData(entity=ent, ops=tuple(ops))


async def alter(client, *entries, validate_only=False) -> dict:
    response = await client.send(
        alter_v1.AlterClientQuotasRequest(entries=entries, validate_only=validate_only)
    )
    return {
        tuple((e.entity_type, e.entity_name) for e in r.entity): (r.error_code, r.error_message)
        for r in response.entries
    }


async def describe(client, *components, strict=False):
    return await client.send(
        describe_v1.DescribeClientQuotasRequest(
            components=tuple(
                describe_v1.ComponentData(entity_type=t, match_type=m, match=n)
                for t, m, n in components
            ),
            strict=strict,
        )
    )


def listed(response) -> dict:
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in r.entity): {v.key: v.value for v in r.values}
        for r in response.entries
    }


OK = (ErrorCode.none, None)


async def test_set_describe_and_remove_quotas(broker, broker_client):
    results = await alter(
        broker_client,
        entry(entity(user="alice"), producer_byte_rate=1024, request_percentage=12.5),
        entry(entity(user=None), consumer_byte_rate=2048),
        entry(entity(user="alice", client_id="app"), producer_byte_rate=512),
        entry(entity(client_id=None), controller_mutation_rate=2.5),
        entry(entity(ip="10.1.2.3"), connection_creation_rate=30),
        entry(entity(ip=None), connection_creation_rate=100),
    )
    assert set(results.values()) == {OK}
    everything = listed(await describe(broker_client))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        (("user", None),): {"consumer_byte_rate": 2048.0},
        (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 512.0},
        (("client-id", None),): {"controller_mutation_rate": 2.5},
        (("ip", "10.1.2.3"),): {"connection_creation_rate": 30.0},
        (("ip", None),): {"connection_creation_rate": 100.0},
    }
    # Exact user: both alice entities unless strict.
    alice = listed(await describe(broker_client, ("user", EXACT, "alice")))
    assert set(alice) == {(("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    strict = listed(await describe(broker_client, ("user", EXACT, "alice"), strict=True))
    assert set(strict) == {(("user", "alice"),)}
    defaults = listed(await describe(broker_client, ("user", DEFAULT, None)))
    assert set(defaults) == {(("user", None),)}
    any_ip = listed(await describe(broker_client, ("ip", ANY, None)))
    assert set(any_ip) == {(("ip", "10.1.2.3"),), (("ip", None),)}
    pair = listed(
        await describe(broker_client, ("user", ANY, None), ("client-id", EXACT, "app"), strict=True)
    )
    assert set(pair) == {(("client-id", "app"), ("user", "alice"))}

    # Removing one key keeps the others; removing the last drops the entity.
    assert await alter(broker_client, entry(entity(user="alice"), remove=["request_percentage"]))
    assert listed(await describe(broker_client, ("user", EXACT, "alice"), strict=True)) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0}
    }
    await alter(broker_client, entry(entity(user="alice"), remove=["producer_byte_rate"]))
    assert listed(await describe(broker_client, ("user", EXACT, "alice"), strict=True)) == {}


@pytest.mark.parametrize(
    ("ent", "values", "message"),
    [
        (entity(user="a"), {"producer_byte_rate": 10.5}, "producer_byte_rate cannot be a fractional value."),
        (entity(user="a"), {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater than 0"),
        (entity(user="a"), {"consumer_byte_rate": -1}, "Quota consumer_byte_rate must be greater than 0"),
        (entity(user="a"), {"connection_creation_rate": 5}, "Invalid configuration key connection_creation_rate"),
        (entity(ip="1.2.3.4"), {"producer_byte_rate": 5}, "Invalid configuration key producer_byte_rate"),
        (entity(ip="1.2.3.4"), {"connection_creation_rate": 2.0**31}, "Proposed value for connection_creation_rate is too large for an INT."),
        (entity(ip="not-an-address"), {"connection_creation_rate": 5}, "not-an-address is not a valid IP or resolvable host."),
        (entity(user="a", ip="1.2.3.4"), {"connection_creation_rate": 5}, "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (entity(), {"producer_byte_rate": 5}, "Invalid empty client quota entity"),
        (entity(user=""), {"producer_byte_rate": 5}, "Empty user not supported"),
        ((alter_v1.EntityData(entity_type="group", entity_name="g"),), {"producer_byte_rate": 5}, "Unhandled client quota entity type: group"),
        (entity(user="a"), {"unknown_key": 5}, "Invalid configuration key unknown_key"),
    ],
)  # fmt: skip
async def test_alter_validation_as_kafkas_control_manager(
    broker, broker_client, ent, values, message
):
    results = await alter(broker_client, entry(ent, **values))
    assert list(results.values()) == [(ErrorCode.invalid_request, message)]
    assert listed(await describe(broker_client)) == {}


async def test_each_entity_answers_alone_and_validate_only_changes_nothing(broker, broker_client):
    results = await alter(
        broker_client,
        entry(entity(client_id="good"), producer_byte_rate=100),
        entry(entity(client_id="bad"), producer_byte_rate=1.5),
    )
    assert results[(("client-id", "good"),)] == OK
    assert results[(("client-id", "bad"),)][0] == ErrorCode.invalid_request
    assert set(listed(await describe(broker_client))) == {(("client-id", "good"),)}

    checked = await alter(
        broker_client, entry(entity(client_id="other"), producer_byte_rate=7), validate_only=True
    )
    assert checked == {(("client-id", "other"),): OK}
    assert set(listed(await describe(broker_client))) == {(("client-id", "good"),)}

    twice = await alter(
        broker_client,
        entry(entity(client_id="dup"), producer_byte_rate=1),
        entry(entity(client_id="dup"), producer_byte_rate=2),
    )
    # As Kafka: the second mention is an error, the first one's change stands.
    assert twice == {
        (("client-id", "dup"),): (
            ErrorCode.invalid_request,
            "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=dup})",
        )
    }
    duplicate_key = alter_v1.EntryData(
        entity=entity(user="k"),
        ops=(
            alter_v1.OpData(key="producer_byte_rate", value=1.0, remove=False),
            alter_v1.OpData(key="producer_byte_rate", value=2.0, remove=False),
        ),
    )
    assert (await alter(broker_client, duplicate_key))[(("user", "k"),)][0] == (
        ErrorCode.invalid_request
    )
    assert listed(await describe(broker_client)) == {
        (("client-id", "good"),): {"producer_byte_rate": 100.0},
        (("client-id", "dup"),): {"producer_byte_rate": 1.0},
    }


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ((("user", EXACT, None),), ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ((("user", DEFAULT, "x"),), ErrorCode.invalid_request, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
        ((("user", ANY, None), ("user", ANY, None)), ErrorCode.invalid_request, "Entity type user cannot appear more than once in the filter."),
        ((("ip", ANY, None), ("user", ANY, None)), ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component."),
        ((("group", ANY, None),), ErrorCode.unsupported_version, "Unsupported entity type group"),
        ((("user", 7, None),), ErrorCode.invalid_request, "Unknown match type 7"),
    ],
)  # fmt: skip
async def test_describe_filter_errors(broker, broker_client, components, code, message):
    response = await describe(broker_client, *components)
    assert (response.error_code, response.error_message, response.entries) == (code, message, None)


async def test_ip_quotas_match_every_spelling_of_the_address(broker, broker_client):
    await alter(
        broker_client,
        entry(entity(ip="2001:DB8:0::1"), connection_creation_rate=5),
        entry(entity(ip="::ffff:10.0.0.1"), connection_creation_rate=6),
    )
    assert broker.quotas.configs.ip_connection_rate("2001:db8::1") == 5.0
    assert broker.quotas.configs.ip_connection_rate("10.0.0.1") == 6.0
    # Described as they were given, as Kafka keeps the name.
    assert set(listed(await describe(broker_client))) == {
        (("ip", "2001:DB8:0::1"),),
        (("ip", "::ffff:10.0.0.1"),),
    }


async def test_quotas_survive_a_restart(tmp_path):
    async with running_broker(tmp_path) as (_, client):
        await alter(
            client,
            entry(entity(user=None, client_id="c"), producer_byte_rate=4096),
            entry(entity(ip="::1"), connection_creation_rate=9),
        )
    async with running_broker(tmp_path) as (restarted, client):
        assert listed(await describe(client)) == {
            (("client-id", "c"), ("user", None)): {"producer_byte_rate": 4096.0},
            (("ip", "::1"),): {"connection_creation_rate": 9.0},
        }
        tags, limit = restarted.quotas.configs.resolve("producer_byte_rate", "bob", "c")
        assert (tags, limit) == (("bob", "c"), 4096.0)
