"""ACLs with real clients against a broker process with Kafka's StandardAuthorizer configured.

confluent-kafka's AdminClient creates, lists and deletes ACLs (TRANSACTIONAL_ID and PREFIXED
ones included); a transactional producer is refused init_transactions without WRITE on its
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), cannot add a partition of a topic it
may not write, is granted a family of ids by a PREFIXED ACL and refused by a DENY however many
ALLOWs there are; a consumer without READ on its group cannot join it.

The clients connect over PLAINTEXT, so their principal is User:ANONYMOUS. The broker is first
started with that principal as a super user to grant it what administering ACLs and topics
needs (ALTER, DESCRIBE and CREATE on the cluster), then restarted without: the ACLs it keeps
are persisted in the metadata store. `PRINCIPAL` and `client_config` are the two places an
authenticated principal will replace it.
"""

from __future__ import annotations

import uuid

import pytest
from broker_process import BrokerProcess
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

pytestmark = pytest.mark.timeout(120)

PRINCIPAL = "User:ANONYMOUS"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLUSTER = "kafka-cluster"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def acl(rtype, name, op, perm=ALLOW, pattern=LITERAL, principal=PRINCIPAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def acl_filter(
    rtype=ResourceType.ANY, name: str | None = None, pattern=ResourcePatternType.ANY
) -> AclBindingFilter:
    """The bindings of any principal, host, operation and permission on these resources."""
    return AclBindingFilter(
        rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY
    )


EVERYTHING = acl_filter()

ADMINISTRATION = [
    acl(ResourceType.BROKER, CLUSTER, AclOperation.ALTER),
    acl(ResourceType.BROKER, CLUSTER, AclOperation.CREATE),
]


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("acl-logs")
    bootstrap = BrokerProcess(
        log_dir, f"authorizer.class.name={STANDARD_AUTHORIZER}", f"super.users={PRINCIPAL}"
    ).start()
    try:
        grant(AdminClient({"bootstrap.servers": bootstrap.bootstrap}), *ADMINISTRATION)
    finally:
        assert bootstrap.stop() == 0, "".join(bootstrap.output)
    broker = BrokerProcess(log_dir, f"authorizer.class.name={STANDARD_AUTHORIZER}").start()
    yield broker
    assert broker.stop() == 0, "".join(broker.output)


@pytest.fixture
def client_config(secured_broker) -> dict:
    return {"bootstrap.servers": secured_broker.bootstrap}


@pytest.fixture
def admin(client_config) -> AdminClient:
    return AdminClient(client_config)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def revoke(admin: AdminClient, *bindings: AclBinding) -> None:
    filters = [
        AclBindingFilter(
            b.restype,
            b.name,
            b.resource_pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        )
        for b in bindings
    ]
    for future in admin.delete_acls(filters).values():
        future.result(30)


def new_topic(admin: AdminClient, prefix: str) -> str:
    name = topic_name(prefix)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def error_code(excinfo) -> int:
    return excinfo.value.args[0].code()


def transactional_producer(client_config, txn_id: str) -> Producer:
    return Producer({**client_config, "transactional.id": txn_id, "transaction.timeout.ms": 30000})


def commit_error(producer: Producer, *records: tuple[str, bytes]) -> KafkaError:
    """Begins a transaction and produces each (topic, value) in turn, flushed, so that each
    partition joins the transaction in its own AddPartitionsToTxn; returns the error that
    commit_transaction raises, one the transaction must be aborted for."""
    producer.begin_transaction()
    for topic, value in records:
        producer.produce(topic, value)
        producer.flush(30)
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(30)
    error = refused.value.args[0]
    assert error.txn_requires_abort(), error
    return error


def first_poll(config: dict, topic: str, wanted, what: str):
    """`wanted(message)` for the first message a new consumer subscribed to `topic` polls for
    which it is truthy."""
    consumer = Consumer(config)
    consumer.subscribe([topic])

    def polled():
        msg = consumer.poll(0.2)
        return msg is not None and wanted(msg)

    try:
        return wait_until(polled, what=what)
    finally:
        consumer.close()


def group_error(config: dict, topic: str) -> KafkaError:
    """The first error a consumer subscribed to `topic` reports."""
    return first_poll(config, topic, lambda m: m.error(), "the consumer's group error")


def first_value(config: dict, topic: str) -> bytes:
    """The value of the first record a consumer subscribed to `topic` receives."""
    return first_poll(config, topic, lambda m: not m.error() and m.value(), "a record")


def test_acls_are_created_listed_and_deleted_through_the_admin_client(admin):
    suffix = uuid.uuid4().hex[:8]
    bindings = [
        acl(ResourceType.TRANSACTIONAL_ID, f"app-{suffix}-", AclOperation.WRITE, pattern=PREFIXED),
        acl(ResourceType.TRANSACTIONAL_ID, f"app-{suffix}-x", AclOperation.DESCRIBE, DENY),
        acl(ResourceType.TOPIC, f"orders-{suffix}", AclOperation.READ, host="10.0.0.1"),
        acl(ResourceType.GROUP, f"group-{suffix}", AclOperation.READ, principal="User:alice"),
    ]
    grant(admin, *bindings)

    def listed(binding_filter):
        return set(admin.describe_acls(binding_filter).result(30))

    assert set(bindings) <= listed(EVERYTHING)
    transactional = acl_filter(ResourceType.TRANSACTIONAL_ID)
    assert {b for b in listed(transactional) if suffix in b.name} == set(bindings[:2])
    # MATCH: every ACL that applies to the transactional id app-<suffix>-x.
    applying = acl_filter(
        ResourceType.TRANSACTIONAL_ID, f"app-{suffix}-x", ResourcePatternType.MATCH
    )
    assert listed(applying) == set(bindings[:2])

    prefixed = acl_filter(ResourceType.ANY, f"app-{suffix}-", PREFIXED)
    deleted = admin.delete_acls([prefixed])[prefixed].result(30)
    assert deleted == [bindings[0]]
    revoke(admin, *bindings[1:])
    assert not {b for b in listed(EVERYTHING) if suffix in b.name}


def test_init_transactions_needs_write_on_the_transactional_id(admin, client_config):
    txn_id = f"unauthorized-{uuid.uuid4().hex}"
    producer = transactional_producer(client_config, txn_id)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert error_code(refused) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(admin, acl(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE))
    producer = transactional_producer(client_config, txn_id)
    producer.init_transactions(30)


def test_without_write_on_a_topic_its_partition_cannot_join_the_transaction(admin, client_config):
    txn_id = f"no-topic-write-{uuid.uuid4().hex}"
    writable, readonly = new_topic(admin, "acl-writable"), new_topic(admin, "acl-readonly")
    grant(
        admin,
        acl(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE),
        acl(ResourceType.TOPIC, writable, AclOperation.WRITE),
        # DESCRIBE alone: the producer finds the partition, but may not add it.
        acl(ResourceType.TOPIC, readonly, AclOperation.DESCRIBE),
    )
    producer = transactional_producer(client_config, txn_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(writable, b"fine")
    producer.commit_transaction(30)

    refused = commit_error(producer, (readonly, b"refused"))
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_prefixed_acl_grants_a_family_of_ids_and_a_deny_overrides_it(admin, client_config):
    family = f"family-{uuid.uuid4().hex[:8]}-"
    grant(
        admin,
        acl(ResourceType.TRANSACTIONAL_ID, family, AclOperation.WRITE, pattern=PREFIXED),
        acl(ResourceType.TRANSACTIONAL_ID, "*", AclOperation.ALL),
        acl(ResourceType.TRANSACTIONAL_ID, f"{family}denied", AclOperation.WRITE, DENY),
    )
    for member in ("1", "payments"):
        transactional_producer(client_config, family + member).init_transactions(30)
    producer = transactional_producer(client_config, f"{family}denied")
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert error_code(refused) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_consumer_without_read_on_its_group_cannot_join(admin, client_config):
    topic = new_topic(admin, "acl-consume")
    group = f"acl-group-{uuid.uuid4().hex[:8]}"
    grant(
        admin,
        acl(ResourceType.TOPIC, topic, AclOperation.READ),
        acl(ResourceType.TOPIC, topic, AclOperation.WRITE),
        # DESCRIBE: the consumer finds its coordinator, then JoinGroup is refused.
        acl(ResourceType.GROUP, group, AclOperation.DESCRIBE),
    )
    producer = Producer(client_config)
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0

    config = {**client_config, "group.id": group, "auto.offset.reset": "earliest"}
    assert group_error(config, topic).code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    grant(admin, acl(ResourceType.GROUP, group, AclOperation.READ))
    assert first_value(config, topic) == b"hello"
