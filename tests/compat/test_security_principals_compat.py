"""Authorization of real, distinct principals with real clients, against a broker process with
Kafka's StandardAuthorizer and PLAINTEXT, SASL_PLAINTEXT (SCRAM-SHA-512), SASL_SSL
(SCRAM-SHA-512) and SSL (client certificates required) listeners on loopback.

The users are set up the Kafka way: the broker first starts with `super.users=User:ANONYMOUS;
User:admin`, and `admin` is created with AlterUserScramCredentials on the PLAINTEXT listener;
it then restarts with `super.users=User:admin` only, and `admin`, over SASL, creates alice,
bob, carol and dana and every topic and ACL (confluent-kafka's AdminClient). Each test's ACLs
are deleted after it, so none leaks into the next.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ResourceType,
)
from test_acls_compat import (
    DENY,
    EVERYTHING,
    PREFIXED,
    acl,
    commit_error,
    error_code,
    first_value,
    grant,
    group_error,
    new_topic,
    revoke,
    transactional_producer,
)
from test_confluent_kafka import consume_all
from test_sasl_compat import (
    EXPECTED,
    confluent_round_trip,
    confluent_settings,
    create_users,
    kafka_python_round_trip,
    kafka_python_settings,
    mtls_settings,
    scram_user,
    secure_broker_process,
)

pytestmark = pytest.mark.timeout(180)

USERS = ("alice", "bob", "carol", "dana")  # and admin, the super user
SVC_DN = "CN=svc,OU=eng,O=Fjord,C=NO"
INTRUDER_DN = "CN=intruder,OU=eng,O=Fjord,C=NO"
TXN = ResourceType.TRANSACTIONAL_ID
READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE


def password(user: str) -> str:
    return f"{user}-secret"


def principal(user: str) -> str:
    return f"User:{user}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    secure = secure_broker_process(
        tmp_path_factory,
        {"svc": SVC_DN, "intruder": INTRUDER_DN},
        "super.users=User:ANONYMOUS;User:admin",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
    )
    process = secure.process.start()
    try:
        first = scram_user("admin", password("admin").encode())
        create_users({"bootstrap.servers": process.bootstrap}, first)
    finally:
        assert process.stop() == 0, "".join(process.output)
    process.overrides = [
        "super.users=User:admin" if o.startswith("super.users=") else o for o in process.overrides
    ]
    process.start()
    create_users(as_user(secure, "admin"), *(scram_user(u, password(u).encode()) for u in USERS))
    yield secure
    assert process.stop() == 0, "".join(process.output)


def as_user(broker, user: str, listener: str = "SASL_PLAINTEXT", **extra) -> dict:
    """confluent-kafka settings for `user` over SCRAM-SHA-512."""
    login = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user}
    login["sasl.password"] = password(user)
    return confluent_settings(broker, listener, **login, **extra)


@pytest.fixture(scope="module")
def admin(broker) -> AdminClient:
    return AdminClient(as_user(broker, "admin"))


@pytest.fixture
def allow(admin):
    """Creates ACLs through `admin`, and deletes them after the test."""
    granted = []

    def create(*bindings):
        grant(admin, *bindings)
        granted.extend(bindings)

    yield create
    if granted:
        revoke(admin, *granted)


def refused_code(settings: dict, txn_id: str) -> int:
    with pytest.raises(KafkaException) as refused:
        transactional_producer(settings, txn_id).init_transactions(30)
    return error_code(refused)


def delivery_error(settings: dict, topic: str) -> KafkaError | None:
    """Produces one record; the error of its delivery report."""
    reports = []
    producer = Producer(settings)
    producer.produce(topic, b"hello", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    return reports[0]


def values(broker, topic: str, expected: int, **extra) -> list[bytes]:
    """Every record of the single-partition `topic`, read back by admin."""
    settings = as_user(broker, "admin", **extra)
    bootstrap = settings["bootstrap.servers"]
    got = consume_all(bootstrap, topic, 1, expected, row=lambda m: m.value(), settings=settings)
    return got[0]


def test_anonymous_is_nobody_once_admin_exists(broker):
    """admin's SCRAM credential, created on the PLAINTEXT listener while User:ANONYMOUS was a
    super user, outlived the restart (admin created the others with it); now
    User:ANONYMOUS, like a user without ACLs, may not create users."""
    for settings in ({"bootstrap.servers": broker.bootstrap("PLAINTEXT")}, as_user(broker, "dana")):
        with pytest.raises(KafkaException) as refused:
            create_users(settings, scram_user("mallory", b"mallory-secret"))
        assert error_code(refused) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_user_with_acls_produces_and_consumes(broker, admin, allow, client, listener):
    """dana, not a super user, with WRITE and READ on the topic and READ on the group (the
    round trips consume in a group named as the topic)."""
    topic = new_topic(admin, f"dana-{client}")
    dana = principal("dana")
    allow(
        acl(ResourceType.TOPIC, topic, WRITE, principal=dana),
        acl(ResourceType.TOPIC, topic, READ, principal=dana),
        acl(ResourceType.GROUP, topic, READ, principal=dana),
    )
    if client == "confluent-kafka":
        assert confluent_round_trip(as_user(broker, "dana", listener), topic) == EXPECTED
    else:
        settings = kafka_python_settings(
            broker,
            listener,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="dana",
            sasl_plain_password=password("dana"),
        )
        assert kafka_python_round_trip(settings, topic) == EXPECTED


def test_alice_needs_write_on_her_transactional_id_and_on_each_topic(broker, admin, allow):
    alice = as_user(broker, "alice")
    writable, refused_topic = new_topic(admin, "alice-w"), new_topic(admin, "alice-x")
    assert refused_code(alice, "app-1") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    allow(
        acl(TXN, "app-1", WRITE, principal=principal("alice")),
        acl(ResourceType.TOPIC, writable, WRITE, principal=principal("alice")),
        # DESCRIBE alone: alice finds the partition, but may not add it to a transaction.
        acl(ResourceType.TOPIC, refused_topic, DESCRIBE, principal=principal("alice")),
    )
    producer = transactional_producer(alice, "app-1")
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(writable, b"committed")
    producer.commit_transaction(30)

    # `writable` joins the transaction, then adding `refused_topic` fails: the transaction
    # is aborted. (Were nothing added, EndTxn(ABORT) would find the last transaction
    # committed and be refused INVALID_TXN_STATE, by Kafka as by Fjord.)
    refused = commit_error(producer, (writable, b"aborted"), (refused_topic, b"refused"))
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    producer.abort_transaction(30)

    read_committed = {"isolation.level": "read_committed"}
    assert values(broker, writable, 1, **read_committed) == [b"committed"]
    read_uncommitted = {"isolation.level": "read_uncommitted"}
    assert values(broker, writable, 2, **read_uncommitted) == [b"committed", b"aborted"]
    assert values(broker, refused_topic, 0) == []


def test_a_prefixed_acl_grants_a_family_of_ids_and_a_deny_overrides_it(broker, allow):
    alice = as_user(broker, "alice")
    allow(acl(TXN, "app-", WRITE, pattern=PREFIXED, principal=principal("alice")))
    for txn_id in ("app-1", "app-2"):
        transactional_producer(alice, txn_id).init_transactions(30)
    assert refused_code(alice, "other-1") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    allow(acl(TXN, "app-2", WRITE, DENY, principal=principal("alice")))
    assert refused_code(alice, "app-2") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    transactional_producer(alice, "app-1").init_transactions(30)


def test_acls_belong_to_their_principal(broker, allow):
    """bob's prefix grants bob its ids, alice's grants alice hers, and neither the other's."""
    alice, bob = as_user(broker, "alice"), as_user(broker, "bob")
    allow(
        acl(TXN, "app-", WRITE, pattern=PREFIXED, principal=principal("alice")),
        acl(TXN, "batch-", WRITE, pattern=PREFIXED, principal=principal("bob")),
    )
    assert refused_code(bob, "app-1") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert refused_code(alice, "batch-1") == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    transactional_producer(bob, "batch-1").init_transactions(30)
    transactional_producer(alice, "app-1").init_transactions(30)


def test_the_super_user_runs_a_whole_transaction_without_any_acl(broker, admin):
    """InitProducerId, AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit and
    EndTxn for admin, with no ACL naming admin, its transactional id, topic or group; alice is
    refused the same transactional id."""
    topic = new_topic(admin, "admin-txn")
    suffix = uuid.uuid4().hex[:8]
    txn_id, group = f"admin-txn-{suffix}", f"admin-group-{suffix}"
    acls = admin.describe_acls(EVERYTHING).result(30)
    mentioned = {b.principal for b in acls} | {b.name for b in acls}
    assert not mentioned & {"User:admin", txn_id, topic, group}

    settings = as_user(broker, "admin")
    producer = transactional_producer(settings, txn_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"t{i}".encode())
    consumer = Consumer({**settings, "group.id": group})
    try:
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        assert consumer.committed([TopicPartition(topic, 0)], 30)[0].offset == 5
    finally:
        consumer.close()
    committed = values(broker, topic, 5, **{"isolation.level": "read_committed"})
    assert committed == [f"t{i}".encode() for i in range(5)]

    alice = as_user(broker, "alice")
    assert refused_code(alice, txn_id) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_carol_joins_a_group_only_with_read_on_it(broker, admin, allow, protocol):
    topic = new_topic(admin, f"carol-{protocol}")
    group = f"g-{protocol}-{uuid.uuid4().hex[:8]}"
    assert delivery_error(as_user(broker, "admin"), topic) is None
    carol = principal("carol")
    allow(acl(ResourceType.TOPIC, topic, READ, principal=carol))
    config = as_user(
        broker,
        "carol",
        **{"group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest"},
    )

    def refused() -> bool:
        error = group_error(config, topic)
        if error.code() == KafkaError._FATAL:
            # librdkafka makes a ConsumerGroupHeartbeat's GROUP_AUTHORIZATION_FAILED fatal.
            assert "ConsumerGroupHeartbeat" in error.str(), error
            return "Group authorization failed" in error.str()
        return error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # Without any ACL on the group FindCoordinator is refused; with DESCRIBE alone, the join
    # (JoinGroup, or the consumer protocol's ConsumerGroupHeartbeat).
    assert refused()
    allow(acl(ResourceType.GROUP, group, DESCRIBE, principal=carol))
    assert refused()

    allow(acl(ResourceType.GROUP, group, READ, principal=carol))
    assert first_value(config, topic) == b"hello"


def test_metadata_lists_only_the_topics_a_principal_may_describe(broker, admin, allow):
    described, readable, hidden, public = (
        new_topic(admin, name) for name in ("described", "readable", "hidden", "public")
    )
    carol = principal("carol")
    allow(
        acl(ResourceType.TOPIC, described, DESCRIBE, principal=carol),
        acl(ResourceType.TOPIC, readable, READ, principal=carol),
        acl(ResourceType.TOPIC, public, READ, principal="User:*"),
        acl(ResourceType.TOPIC, public, DESCRIBE, DENY, principal=carol),
    )

    def listed(user: str, topic: str | None = None):
        return AdminClient(as_user(broker, user)).list_topics(topic, timeout=30).topics

    assert set(listed("carol")) == {described, readable}
    assert set(listed("bob")) == {public}
    assert {described, readable, hidden, public} <= set(listed("admin"))
    for topic in (hidden, public):
        error = listed("carol", topic)[topic].error
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_mutual_tls_principal_gets_exactly_its_acls(broker, admin, allow):
    """User:CN=svc,OU=eng,O=Fjord,C=NO may write `granted` and nothing else; a certificate
    from the same CA with another subject may not write it."""
    granted, other = new_topic(admin, "svc-granted"), new_topic(admin, "svc-other")
    svc = principal(SVC_DN)
    allow(
        acl(ResourceType.TOPIC, granted, WRITE, principal=svc),
        acl(ResourceType.TOPIC, other, DESCRIBE, principal=svc),
    )
    assert delivery_error(mtls_settings(broker, "svc"), granted) is None
    refused = delivery_error(mtls_settings(broker, "svc"), other)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    intruder = delivery_error(mtls_settings(broker, "intruder"), granted)
    assert intruder is not None and intruder.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert values(broker, granted, 1) == [b"hello"]
    assert values(broker, other, 0) == []
