"""metadata.store.url carries the metadata database's password (often the control plane's own
database): DescribeConfigs hides it as Kafka hides its password-type configs, and a broker that
cannot start on it does not print it."""

from __future__ import annotations

import pytest
from broker_process import run_broker
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka_requests import req
from kio.schema.errors import ErrorCode
from postgres_database import skip_without_postgres, throwaway_database

from broker.client.connection import BrokerConnection
from broker.protocol import codec

PASSWORD = "store-pa55word"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
DESCRIBE_CONFIGS = 32
STATIC_BROKER_CONFIG = 4


@pytest.fixture
def store_url():
    skip_without_postgres()
    with throwaway_database("fjord_store_secrecy", password=PASSWORD) as url:
        yield url


@pytest.fixture
def secured_cluster_broker(make_broker_process, store_url):
    """One broker of a cluster on `store_url`, SASL/PLAIN only, with the authorizer on: admin
    is the super user (and the broker's own user), alice holds only what a test grants her."""
    jaas = (
        f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";'
    )
    return make_broker_process(
        "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f"sasl.jaas.config={jaas}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        f"metadata.store.url={store_url}",
    ).start()


async def plain_login(broker, user: str, password: str) -> BrokerConnection:
    conn = await BrokerConnection.open(broker.host, broker.port, "fjord-test")
    handshake = await conn.send(req(17, 1, "SaslHandshakeRequest", mechanism="PLAIN"))
    assert handshake.error_code == ErrorCode.none
    token = f"\0{user}\0{password}".encode()
    done = await conn.send(req(36, 2, "SaslAuthenticateRequest", auth_bytes=token))
    assert done.error_code == ErrorCode.none, done.error_message
    return conn


def describe_broker_configs_frame(version: int, keys: tuple[str, ...]) -> bytes:
    resource = req(
        DESCRIBE_CONFIGS,
        version,
        "DescribeConfigsResource",
        resource_type=4,
        resource_name="1",
        configuration_keys=keys,
    )
    request = req(
        DESCRIBE_CONFIGS,
        version,
        "DescribeConfigsRequest",
        resources=(resource,),
        include_synonyms=True,
        include_documentation=True,
    )
    # A correlation id the connection's own requests never reach.
    return codec.encode_request(request, correlation_id=1_000_000)


async def test_describe_configs_hides_the_store_url_from_a_describe_configs_principal(
    secured_cluster_broker,
):
    broker = secured_cluster_broker
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
    )
    grant = AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE_CONFIGS,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([grant]).values():
        future.result(timeout=30)

    alice = await plain_login(broker, "alice", "alice-secret")
    try:
        # v1 brought synonyms, v3 documentation, v4 the flexible encoding: the same answer.
        for version in range(1, 5):
            raw = await alice.send_frame(
                describe_broker_configs_frame(
                    version, ("metadata.store.url", "sasl.enabled.mechanisms")
                )
            )
            assert PASSWORD.encode() not in raw
            _, response = codec.decode_response(raw, DESCRIBE_CONFIGS, version)
            (result,) = response.results
            assert result.error_code == ErrorCode.none  # alice may describe the broker's configs
            configs = {c.name: c for c in result.configs}
            assert configs["sasl.enabled.mechanisms"].value == "PLAIN"
            store = configs["metadata.store.url"]
            assert (store.value, store.is_sensitive) == (None, True)
            assert store.config_source == STATIC_BROKER_CONFIG  # set, only not shown
            # As Kafka's ConfigHelper: the synonyms of a sensitive config carry no value either.
            assert [(s.name, s.value) for s in store.synonyms] == [("metadata.store.url", None)]
    finally:
        await alice.close()


@pytest.mark.parametrize(
    ("store_url", "status", "said"),
    [
        # Refused by the config's validator.
        (f"mysql://fjord:{PASSWORD}@db/fjord", 2, "metadata.store.url"),
        # libpq's own parser quotes the whole URL in its error.
        (f"postgresql://fjord:{PASSWORD}@[::1/fjord", 2, "postgresql://fjord:****@[::1/fjord"),
        # Nothing listens on port 1: the store is unreachable.
        (f"postgresql://fjord:{PASSWORD}@127.0.0.1:1/fjord", 1, "cannot start"),
    ],
)
def test_a_broker_that_cannot_start_on_its_store_url_does_not_print_the_password(
    tmp_path, store_url, status, said
):
    props = tmp_path / "server.properties"
    props.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'logs'}\n"
        f"metrics.listener=\nmetadata.store.url={store_url}\n"
    )
    result = run_broker(str(props))
    assert result.returncode == status, result.stderr
    assert said in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


def test_an_override_quoted_back_is_masked(tmp_path):
    # Without its '=', the whole item is quoted in the refusal.
    item = f"metadata.store.url postgresql://fjord:{PASSWORD}@db/fjord"
    result = run_broker("--override", item)
    assert result.returncode == 2
    assert "--override expects key=value" in result.stderr
    assert PASSWORD not in result.stderr
