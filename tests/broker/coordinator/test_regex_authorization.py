"""Regex subscriptions and topic authorization, sans-io (Kafka's KAFKA-18813 and KAFKA-18961):
a group's regexes resolve to the topics the heartbeating member's principal may DESCRIBE, the
result is a ConsumerGroupRegularExpression record, and it is resolved again when a member
brings a new regex, when topics were created, or when the last resolution is older than the
refresh interval, which is how ACL changes reach regex subscriptions; never twice in 10 s.

`cluster.describable` stands for the ACLs: the topics the heartbeating member may DESCRIBE."""

from __future__ import annotations

import pytest
from test_consumer_group import GROUP, Cluster, Consumer, state

from broker.coordinator.consumer_group import (
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
    REGEX_REFRESH_INTERVAL_MS,
    HeartbeatRequest,
)
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    decode_record,
    encode_record,
)

REGEX = "orders-.*"


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    for name, partitions in (("orders-eu", 2), ("orders-us", 2), ("orders-secret", 2)):
        c.create_topic(name, partitions)
    c.create_topic("payments", 1)
    c.describable = {"orders-eu", "orders-us", "payments"}
    return c


def topic_names(cluster: Cluster, consumer: Consumer) -> set[str]:
    return {cluster.image.topic_by_id(t).name for t in consumer.owned}


def pass_time(cluster: Cluster, ms: int, *consumers: Consumer) -> None:
    """Let `ms` pass while the consumers heartbeat every 5 s, as live ones do."""
    for _ in range(ms // 5_000):
        cluster.advance(5_000)
        for c in consumers:
            c.poll()
    cluster.advance(ms % 5_000)


def regex_records(cluster: Cluster) -> list:
    return [r for r in cluster.log if isinstance(r.key, ConsumerGroupRegularExpressionKey)]


def test_a_regex_resolves_only_to_topics_the_member_may_describe(cluster):
    asked: list[set[str]] = []
    describable = cluster._describable
    cluster._describable = lambda names: asked.append(set(names)) or describable(names)

    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()

    assert topic_names(cluster, a) == {"orders-eu", "orders-us"}
    assert cluster.group().resolved_regexes[REGEX].topics == ("orders-eu", "orders-us")
    assert set(cluster.group().subscription_metadata) == {"orders-eu", "orders-us"}
    assert cluster.group().subscribed_topics() == {"orders-eu", "orders-us"}
    # Only the matching topics are asked about, each once (Kafka's one batched authorize).
    assert asked == [{"orders-eu", "orders-us", "orders-secret"}]
    [record] = regex_records(cluster)
    assert record.key.regular_expression == REGEX
    assert (record.value.topics, record.value.timestamp) == (
        ("orders-eu", "orders-us"),
        cluster.now,
    )
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_topics_named_explicitly_are_not_filtered_by_the_coordinator(cluster):
    # The handler refuses a heartbeat naming a topic without DESCRIBE (TOPIC_AUTHORIZATION_
    # FAILED); what it lets through is the member's subscription as it is.
    a = Consumer(cluster, "a", subscribed_topic_names=("payments",), subscribed_topic_regex=REGEX)
    a.join()
    assert topic_names(cluster, a) == {"orders-eu", "orders-us", "payments"}


def test_a_granted_acl_takes_effect_at_the_periodic_refresh(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    cluster.describable |= {"orders-secret"}  # an ACL is created

    # Nothing is due: no new regex, no new topic, the last resolution is recent.
    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    a.poll()
    assert "orders-secret" not in cluster.group().resolved_regexes[REGEX].topics

    pass_time(cluster, REGEX_REFRESH_INTERVAL_MS - 20_000, a)
    assert "orders-secret" not in cluster.group().resolved_regexes[REGEX].topics
    cluster.advance(10_000)  # the resolution is now older than the refresh interval
    epoch = cluster.group().group_epoch
    a.poll()
    assert cluster.group().group_epoch == epoch + 1
    a.poll()
    assert topic_names(cluster, a) == {"orders-eu", "orders-us", "orders-secret"}
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_a_removed_acl_revokes_the_topic_at_the_periodic_refresh(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    cluster.describable -= {"orders-us"}  # an ACL is deleted (or a DENY added)
    pass_time(cluster, REGEX_REFRESH_INTERVAL_MS + 5_000, a)
    a.poll()
    assert topic_names(cluster, a) == {"orders-eu"}
    assert set(cluster.group().subscription_metadata) == {"orders-eu"}


def test_a_new_topic_resolves_the_regexes_again_with_the_current_acls(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    cluster.describable |= {"orders-secret", "orders-asia"}
    cluster.create_topic("orders-asia", 1)
    a.poll()  # within 10 s of the last resolution: not yet
    assert topic_names(cluster, a) == {"orders-eu", "orders-us"}

    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    a.poll()
    a.poll()
    assert topic_names(cluster, a) == {"orders-eu", "orders-us", "orders-secret", "orders-asia"}


def test_regexes_are_resolved_at_most_once_in_ten_seconds(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    b = Consumer(cluster, "b", subscribed_topic_regex="pay.*")
    a.join()
    b.join()  # a new regex, but the group's last resolution is too recent
    assert "pay.*" not in cluster.group().resolved_regexes
    assert not b.owned
    assert len(regex_records(cluster)) == 1

    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    b.poll()  # unresolved regex: every regex of the group is resolved, once
    assert sorted(r.key.regular_expression for r in regex_records(cluster)[1:]) == [
        "orders-.*",
        "pay.*",
    ]
    for _ in range(3):
        a.poll()
        b.poll()
    assert topic_names(cluster, b) == {"payments"}


def test_the_resolution_uses_the_principal_of_the_member_whose_heartbeat_made_it(cluster):
    # Kafka's behaviour: one resolution per group and regex, made with the authorization of
    # the member whose heartbeat triggered it, and shared by every member subscribed to it.
    cluster.describable = {"orders-eu"}
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    cluster.describable = {"orders-eu", "orders-us", "orders-secret"}
    b = Consumer(cluster, "b", subscribed_topic_regex=REGEX)
    b.join()  # the regex is resolved already: b's rights change nothing
    assert cluster.group().resolved_regexes[REGEX].topics == ("orders-eu",)

    pass_time(cluster, REGEX_REFRESH_INTERVAL_MS - 5_000, b, a)  # a heartbeats last
    assert cluster.group().resolved_regexes[REGEX].topics == ("orders-eu",)
    cluster.advance(5_001)
    b.poll()  # now b's heartbeat resolves it, for b's principal
    assert cluster.group().resolved_regexes[REGEX].topics == (
        "orders-eu",
        "orders-secret",
        "orders-us",
    )


def test_without_an_authorization_nothing_is_resolved(cluster):
    # A caller that cannot authorize for the member (a classic member's JoinGroup in a
    # consumer group) passes no filter: the regexes stay as they are.
    request = HeartbeatRequest(
        GROUP,
        "a",
        0,
        rebalance_timeout_ms=30_000,
        owned_partitions={},
        subscribed_topic_regex=REGEX,
    )
    response = cluster.run(
        cluster.consumer.heartbeat(
            request, cluster.now, client_id="c", client_host="/h", api_version=1
        )
    )
    assert response.assignment == {}
    assert cluster.group().resolved_regexes == {}


def test_the_last_subscriber_leaving_deletes_the_resolution(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    b = Consumer(cluster, "b", subscribed_topic_regex=REGEX)
    a.join()
    b.join()
    a.leave()
    assert REGEX in cluster.group().resolved_regexes
    b.poll(subscribed_topic_regex="pay.*")  # moves away: the regex has no subscriber left
    assert REGEX not in cluster.group().resolved_regexes
    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    b.poll()
    b.poll()
    assert set(cluster.group().resolved_regexes) == {"pay.*"}
    b.leave()
    assert cluster.group().resolved_regexes == {}
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_deleting_the_group_deletes_its_resolutions(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    tombstones = cluster.group().tombstones()
    keys = [type(r.key) for r in tombstones]
    assert keys.index(ConsumerGroupRegularExpressionKey) < keys.index(ConsumerGroupMetadataKey)
    cluster.apply(tombstones)
    assert GROUP not in cluster.coordinator.groups


def test_resolutions_survive_a_restart_and_are_redone_after_it(cluster):
    a = Consumer(cluster, "a", subscribed_topic_regex=REGEX)
    a.join()
    fresh = GroupCoordinator(cluster.config, cluster.image)
    for record in cluster.group().snapshot_records():
        fresh.replay(decode_record(*encode_record(record)))
    assert state(fresh) == state(cluster.coordinator)

    # After a load every topic counts as new, as for Kafka's first metadata image: the next
    # heartbeat 10 s after the last resolution resolves again, with the ACLs of then.
    cluster.coordinator = cluster.replayed()
    cluster.coordinator.on_loaded(cluster.now)
    cluster.describable |= {"orders-secret"}
    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    a.poll()
    a.poll()
    assert topic_names(cluster, a) == {"orders-eu", "orders-us", "orders-secret"}
