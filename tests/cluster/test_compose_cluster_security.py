"""deploy/compose.cluster.yaml's security, read as Docker Compose reads it (no Docker here):
its brokers' properties and its bootstrap service's command run for real on a throwaway
database, with the control plane's credentials from its own environment. The cluster
replicates (the brokers' own principal may do what replication needs), the control plane is
its only super user, and a user added as deploy/README.md says can do what its ACLs allow."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from deploy_files import compose, properties

FILES = ("compose.yaml", "compose.cluster.yaml")
GIVEN = {
    "DJANGO_SECRET_KEY": "not-checked-here",
    "POSTGRES_PASSWORD": "pg-secret",
    "FJORD_SASL_PASSWORD": "control-secret",
    "FJORD_BROKER_PASSWORD": "broker-secret",
}
PROPERTIES_PATH = "/etc/fjord/cluster.properties"
BROKERS = ("broker", "broker-2", "broker-3")


@pytest.fixture(scope="module")
def project() -> dict:
    return compose(*FILES, variables=GIVEN)


def cluster_properties(project: dict) -> dict[str, str]:
    return properties(project["configs"]["fjord-cluster"]["content"])


def protocols(props: dict[str, str]) -> dict[str, str]:
    return dict(item.split(":") for item in props["listener.security.protocol.map"].split(","))


def test_every_listener_authenticates_and_the_authorizer_refuses_what_no_acl_allows(project):
    props = cluster_properties(project)

    assert set(protocols(props).values()) <= {"SASL_PLAINTEXT", "SASL_SSL"}
    assert props["sasl.enabled.mechanisms"].startswith("SCRAM-")
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["allow.everyone.if.no.acl.found"] == "false"
    for name in BROKERS:
        assert PROPERTIES_PATH in project["services"][name]["command"]


def test_the_control_plane_is_the_only_super_user_and_the_brokers_have_their_own(project):
    props = cluster_properties(project)
    control = {name: project["services"][name]["environment"] for name in ("web", "worker", "beat")}

    principals = {f"User:{env['FJORD_SASL_USERNAME']}" for env in control.values()}
    assert props["super.users"].split(";") == list(principals)
    inter_broker = props["inter.broker.listener.name"]
    jaas = props[f"listener.name.{inter_broker.lower()}.scram-sha-512.sasl.jaas.config"]
    assert 'username="fjord-broker"' in jaas
    assert "User:fjord-broker" not in props["super.users"]
    # The control plane talks to the brokers on the inter-broker listener, as its protocol and
    # mechanism want.
    for env in control.values():
        assert env["FJORD_SECURITY_PROTOCOL"] == protocols(props)[inter_broker]
        assert env["FJORD_SASL_MECHANISM"] in props["sasl.enabled.mechanisms"].split(",")
        assert all(address.endswith(":19092") for address in env["FJORD_BOOTSTRAP"].split(","))


def test_brokers_start_after_their_principals_exist_and_publish_on_loopback(project):
    services = project["services"]
    for name in BROKERS:
        assert services[name]["depends_on"]["cluster-bootstrap"] == {
            "condition": "service_completed_successfully"
        }
        for port in services[name].get("ports", []):
            assert port.startswith("127.0.0.1:"), port
    assert services["web"]["ports"] == ["127.0.0.1:8000:8000"]


def harness_overrides(props: dict[str, str]) -> list[str]:
    """The compose brokers' properties on the test harness's one listener (named PLAINTEXT,
    on loopback), which then plays the inter-broker listener with its security."""
    inter_broker = props["inter.broker.listener.name"]
    overrides = []
    for key, value in props.items():
        if key in ("listeners", "log.dirs", "metrics.listener", "metadata.store.url"):
            continue
        if key == "listener.security.protocol.map":
            value = f"PLAINTEXT:{protocols(props)[inter_broker]}"
        elif key == "inter.broker.listener.name":
            value = "PLAINTEXT"
        key = key.replace(f"listener.name.{inter_broker.lower()}.", "listener.name.plaintext.")
        overrides.append(f"{key}={value}")
    return overrides


def client_config(bootstrap: str, env: dict[str, str], user: str, password: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": env["FJORD_SECURITY_PROTOCOL"],
        "sasl.mechanism": env["FJORD_SASL_MECHANISM"],
        "sasl.username": user,
        "sasl.password": password,
    }


def produce_one(config: dict, topic: str) -> object:
    """The delivery error of one record (None when it was written)."""
    errors = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 60000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(90) == 0
    return errors[0]


@pytest.mark.timeout(240)
def test_the_compose_cluster_replicates_and_adds_users_as_its_readme_says(
    project, make_formed_cluster, tmp_path
):
    props = cluster_properties(project)
    cluster = make_formed_cluster(3, harness_overrides(props), network="loopback")
    properties_file = tmp_path / "cluster.properties"
    properties_file.write_text(project["configs"]["fjord-cluster"]["content"])
    command = project["services"]["cluster-bootstrap"]["command"]
    assert command[:3] == ["python", "-m", "broker.bootstrap"]
    # The compose file's properties path, here the same text in tmp_path.
    argv = [str(properties_file) if arg == PROPERTIES_PATH else arg for arg in command[1:]]
    bootstrap = subprocess.run(
        [sys.executable, *argv, "--override", f"metadata.store.url={cluster.database_url}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bootstrap.returncode == 0, bootstrap.stderr
    assert "secret" not in bootstrap.stdout + bootstrap.stderr

    env = project["services"]["web"]["environment"]
    control = client_config(
        cluster.bootstrap, env, env["FJORD_SASL_USERNAME"], env["FJORD_SASL_PASSWORD"]
    )
    admin = AdminClient(control)
    topic = f"compose-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1)], operation_timeout=30)[topic].result(timeout=60)
    # Three replicas, min.insync.replicas=2: written only once followers fetched it, as
    # User:fjord-broker.
    assert produce_one(control, topic) is None

    # The brokers' principal is no super user: it may not create a topic.
    brokers_admin = AdminClient(
        client_config(cluster.bootstrap, env, "fjord-broker", GIVEN["FJORD_BROKER_PASSWORD"])
    )
    other = f"{topic}-by-broker-principal"
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        brokers_admin.create_topics([NewTopic(other, 1)])[other].result(timeout=60)

    # deploy/README.md: a user is a SCRAM credential, and may do only what its ACLs allow.
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion("alice", info, b"alice-secret")
    for done in admin.alter_user_scram_credentials([upsert]).values():
        done.result(timeout=60)
    alice = client_config(cluster.bootstrap, env, "alice", "alice-secret")
    assert produce_one(alice, topic).name() == "TOPIC_AUTHORIZATION_FAILED"
    acl = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for done in admin.create_acls([acl]).values():
        done.result(timeout=60)
    # The ACL reaches the partition's leader through the store's change feed.
    deadline = time.monotonic() + 60
    while (error := produce_one(alice, topic)) is not None and time.monotonic() < deadline:
        assert error.name() == "TOPIC_AUTHORIZATION_FAILED"
    assert error is None
