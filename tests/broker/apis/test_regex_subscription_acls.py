"""ConsumerGroupHeartbeat with a regex subscription against a broker with ACLs (Kafka's
KAFKA-18813): the regex resolves to the topics the member's principal may DESCRIBE, the others
are left out of its assignment without an error, and ACL changes reach the subscription when
the regexes are resolved again (sans-io rules in tests/broker/coordinator)."""

from __future__ import annotations

import pytest
from test_acls_api import GROUP, LITERAL, PREFIXED, Op, R, acl, secured_broker
from test_consumer_groups_api import describe, heartbeat, join, owned

from broker.coordinator import consumer_group
from broker.security.acl import AclBindingFilter
from broker.security.operations import AclPermissionType

V = 1  # SubscribedTopicRegex came with ConsumerGroupHeartbeat v1
REGEX = "orders-.*"


@pytest.fixture
async def secured(tmp_path):
    async with secured_broker(tmp_path / "kafka-logs") as running:
        broker, conn = running
        for name in ("orders-eu", "orders-us", "orders-secret"):
            await broker.create_topic(name, 2, {})
        await broker.create_acls(
            [
                acl(R.GROUP, GROUP, Op.READ),
                acl(R.TOPIC, "orders-eu", Op.DESCRIBE),
                acl(R.TOPIC, "orders-us", Op.READ, pattern=PREFIXED),  # READ implies DESCRIBE
            ]
        )
        yield broker, conn


def topics(broker, response) -> set[str]:
    return {
        broker.image.topic_by_id(tp.topic_id).name
        for tp in response.assignment.topic_partitions
        if tp.partitions
    }


async def test_a_regex_leaves_out_topics_the_principal_may_not_describe(secured):
    broker, conn = secured
    joined = await conn.send(
        join(V, "m", subscribed_topic_names=None, subscribed_topic_regex=REGEX)
    )
    assert joined.error_code == 0
    assert topics(broker, joined) == {"orders-eu", "orders-us"}
    group = broker.group_coordinator.consumer.consumer_group(GROUP)
    assert group.resolved_regexes[REGEX].topics == ("orders-eu", "orders-us")

    # The group holds no topic the principal may not see, so it may describe it.
    await broker.create_acls([acl(R.GROUP, GROUP, Op.DESCRIBE)])
    described = await conn.send(describe(V, GROUP))
    assert described.groups[0].error_code == 0


async def test_acl_changes_reach_the_subscription_when_the_regex_is_resolved_again(
    secured, monkeypatch
):
    broker, conn = secured
    # Resolve at every heartbeat rather than every 10 minutes (Kafka's internal
    # group.consumer.regex.refresh.interval.ms), so that the test need not wait.
    monkeypatch.setattr(consumer_group, "REGEX_BATCH_REFRESH_MIN_INTERVAL_MS", -1)
    broker.group_coordinator.consumer.regex_refresh_interval_ms = -1
    joined = await conn.send(
        join(V, "m", subscribed_topic_names=None, subscribed_topic_regex=REGEX)
    )
    assert topics(broker, joined) == {"orders-eu", "orders-us"}

    await broker.create_acls([acl(R.TOPIC, "orders-secret", Op.DESCRIBE)])
    await broker.delete_acls(
        [AclBindingFilter(R.TOPIC, "orders-eu", LITERAL, None, None, Op.ANY, AclPermissionType.ANY)]
    )
    response, epoch, partitions = joined, joined.member_epoch, owned(V, joined.assignment)
    seen = []
    for _ in range(4):  # revoke orders-eu, then receive orders-secret
        response = await conn.send(heartbeat(V, "m", epoch, topic_partitions=partitions))
        assert response.error_code == 0
        epoch = response.member_epoch
        if response.assignment is not None:
            partitions = owned(V, response.assignment)
            seen.append(topics(broker, response))
    assert seen[-1] == {"orders-us", "orders-secret"}
