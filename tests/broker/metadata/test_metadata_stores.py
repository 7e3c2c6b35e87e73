"""What every MetadataStore keeps, held against both: the embedded SQLite store and the
PostgreSQL one of cluster mode. Each test reopens the store to read what it wrote, so what is
asserted is what is durable."""

from __future__ import annotations

import uuid

import pytest

from broker.metadata.image import TopicMetadata
from broker.metadata.postgres_store import PostgresMetadataStore
from broker.metadata.store import SqliteMetadataStore
from broker.quota.client_quotas import ClientQuotaEntity
from broker.security.acl import AccessControlEntry, AclBinding, ResourcePattern
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType
from broker.security.scram import ScramCredential


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request, tmp_path):
    """Opens a store on the test's one location (a directory, a database) each call."""
    if request.param == "sqlite":

        def opener():
            return SqliteMetadataStore(tmp_path)
    else:
        url = request.getfixturevalue("postgres_url")

        def opener():
            return PostgresMetadataStore(url)

    stores = []

    def open_() -> SqliteMetadataStore | PostgresMetadataStore:
        stores.append(opener())
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


def topic_names(store) -> dict[str, TopicMetadata]:
    return {t.name: t for t in store.load(None).topics()}


def acl(name: str, operation: AclOperation = AclOperation.READ) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
    )


def test_load_keeps_the_cluster_id_it_is_given_or_makes(open_store):
    store = open_store()
    made = store.load(None).cluster_id

    assert made and open_store().load(None).cluster_id == made
    assert open_store().load(made).cluster_id == made
    with pytest.raises(ValueError, match="does not match the stored cluster id"):
        open_store().load("another-cluster")


def test_load_stores_the_cluster_id_given_the_first_time(open_store):
    assert open_store().load("given-id").cluster_id == "given-id"

    assert open_store().load(None).cluster_id == "given-id"


def test_topics_are_created_grown_configured_and_deleted(open_store):
    store = open_store()
    store.load(None)
    orders = TopicMetadata("orders", uuid.uuid4(), 2, {"retention.ms": "1000"})
    store.create_topic(orders)
    store.create_topic(TopicMetadata("doomed", uuid.uuid4(), 1))

    store.set_partitions("orders", 5)
    store.set_topic_configs("orders", {"cleanup.policy": "compact"})
    store.delete_topic("doomed")

    topics = topic_names(open_store())
    assert list(topics) == ["orders"]
    assert topics["orders"].topic_id == orders.topic_id
    assert topics["orders"].partitions == 5
    assert topics["orders"].configs == {"cleanup.policy": "compact"}


def test_writes_to_a_missing_topic_change_nothing(open_store):
    store = open_store()
    store.load(None)

    store.set_partitions("missing", 3)
    store.set_topic_configs("missing", {"retention.ms": "1"})
    store.delete_topic("missing")

    assert topic_names(open_store()) == {}


def test_broker_configs_are_replaced_as_a_whole(open_store):
    store = open_store()
    store.set_broker_configs({"log.retention.ms": "1000", "num.partitions": "3"})

    store.set_broker_configs({"num.partitions": "4"})

    assert open_store().broker_configs() == {"num.partitions": "4"}


def test_group_configs_are_set_per_group_and_removed_when_empty(open_store):
    store = open_store()
    store.set_group_configs("g1", {"consumer.session.timeout.ms": "45000"})
    store.set_group_configs("g2", {"consumer.heartbeat.interval.ms": "5000"})
    store.set_group_configs("g1", {"consumer.session.timeout.ms": "50000"})

    store.set_group_configs("g2", {})

    assert open_store().group_configs() == {"g1": {"consumer.session.timeout.ms": "50000"}}


def test_acls_are_added_once_and_removed(open_store):
    store = open_store()
    store.add_acls([acl("a"), acl("b"), acl("a", AclOperation.WRITE)])
    store.add_acls([acl("a")])

    store.remove_acls([acl("b"), acl("never-added")])

    assert sorted(open_store().acls(), key=repr) == sorted(
        [acl("a"), acl("a", AclOperation.WRITE)], key=repr
    )


def test_producer_id_blocks_follow_each_other_across_restarts(open_store):
    store = open_store()
    assert store.allocate_producer_ids(1000) == 0
    assert store.allocate_producer_ids(10) == 1000

    assert open_store().allocate_producer_ids(5) == 1010


def test_scram_credentials_are_upserted_and_deleted_together(open_store):
    store = open_store()
    old = ScramCredential(b"salt", b"stored", b"server", 4096)
    new = ScramCredential(b"salt2", b"stored2", b"server2", 8192)
    store.alter_scram_credentials(
        {("alice", "SCRAM-SHA-256"): old, ("bob", "SCRAM-SHA-512"): old}, []
    )

    store.alter_scram_credentials({("alice", "SCRAM-SHA-256"): new}, [("bob", "SCRAM-SHA-512")])

    assert open_store().scram_credentials() == {("alice", "SCRAM-SHA-256"): new}


def test_features_are_finalized_at_the_defaults_first_then_as_set(open_store):
    store = open_store()
    assert store.finalized_features({"metadata.version": 30}) == ({"metadata.version": 30}, 0)
    assert open_store().finalized_features({"metadata.version": 99}) == (
        {"metadata.version": 30},
        0,
    )

    store.set_finalized_features({"metadata.version": 31, "group.version": 1}, 1)

    assert open_store().finalized_features({"metadata.version": 30}) == (
        {"metadata.version": 31, "group.version": 1},
        1,
    )


def test_client_quotas_are_set_and_removed_per_key(open_store):
    store = open_store()
    alice = ClientQuotaEntity.of({"user": "alice"})
    default_client = ClientQuotaEntity.of({"client-id": None, "user": "bob"})
    store.alter_client_quotas(
        {
            alice: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
            default_client: {"request_percentage": 50.0},
        }
    )

    store.alter_client_quotas({alice: {"consumer_byte_rate": None}})

    assert open_store().client_quotas() == {
        alice: {"producer_byte_rate": 1024.0},
        default_client: {"request_percentage": 50.0},
    }
