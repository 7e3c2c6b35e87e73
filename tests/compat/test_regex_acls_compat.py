"""A regex subscription of confluent-kafka (librdkafka, `group.protocol=consumer`, KIP-848)
against a broker process with Kafka's StandardAuthorizer: the coordinator resolves the regex
to the topics the consumer's principal may DESCRIBE only (Kafka's KAFKA-18813), and a topic it
is granted later joins the subscription when the regexes are resolved again, here because a
new matching topic was created (Kafka re-resolves on new topics, at most every 10 s, and
every group.consumer.regex.refresh.interval.ms, ten minutes, otherwise).

What the group holds is read from the broker with ConsumerGroupDescribe, which the consumer's
principal could not even describe if the group held a topic it may not DESCRIBE.

The clients connect over PLAINTEXT (principal User:ANONYMOUS); the broker first runs with it
as a super user to grant what creating topics and ACLs needs, then without.
"""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

pytestmark = pytest.mark.timeout(180)

PRINCIPAL = "User:ANONYMOUS"
AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
OVERRIDES = (
    AUTHORIZER,
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=500",
)


def acl(rtype, name, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, PRINCIPAL, "*", op, AclPermissionType.ALLOW)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def create_topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(30)


@pytest.fixture
def bootstrap(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    first = BrokerProcess(log_dir, *OVERRIDES, f"super.users={PRINCIPAL}").start()
    try:
        grant(
            AdminClient({"bootstrap.servers": first.bootstrap}),
            acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
            acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE),
        )
    finally:
        assert first.stop() == 0, "".join(first.output)
    broker = BrokerProcess(log_dir, *OVERRIDES).start()
    yield broker.bootstrap
    assert broker.stop() == 0, "".join(broker.output)


def group_topics(admin: AdminClient, group: str) -> set[str]:
    """The topics of the group's members' assignments and target assignments, as the broker
    describes them (raises if the principal may not describe one of them)."""
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    topics = set()
    for member in described.members:
        for assignment in (member.assignment, member.target_assignment):
            if assignment is not None:
                topics |= {tp.topic for tp in assignment.topic_partitions}
    return topics


def test_a_regex_subscription_gets_only_describable_topics_until_granted(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix = topic_name("rx-acl")
    seen, hidden, later = f"{prefix}-seen", f"{prefix}-hidden", f"{prefix}-later"
    create_topics(admin, seen, hidden)
    grant(
        admin,
        acl(ResourceType.GROUP, prefix, AclOperation.READ),
        acl(ResourceType.TOPIC, seen, AclOperation.READ),
    )

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": prefix,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([f"^{prefix}-.*"])

        def assigned() -> set[tuple[str, int]]:
            consumer.poll(0.05)
            return {(tp.topic, tp.partition) for tp in consumer.assignment()}

        wait_until(lambda: assigned() == {(seen, 0), (seen, 1)}, 60, f"{seen} assigned")
        assert group_topics(admin, prefix) == {seen}

        # Granted READ (so DESCRIBE) on the hidden topic; a new matching topic makes the
        # coordinator resolve the regex again, with the ACLs of now, for both.
        grant(
            admin,
            acl(ResourceType.TOPIC, hidden, AclOperation.READ),
            acl(ResourceType.TOPIC, later, AclOperation.READ),
        )
        create_topics(admin, later)
        everything = {(t, p) for t in (seen, hidden, later) for p in range(2)}
        wait_until(lambda: assigned() == everything, 90, "the granted topics assigned")
        assert group_topics(admin, prefix) == {seen, hidden, later}
    finally:
        consumer.close()
