"""Consumer groups through the REST API, against real confluent-kafka consumers that commit:
described with members and lag, offsets read and reset, configs altered, deleted."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from api.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

URL = "/api/v1/groups/"


@pytest.fixture
def topic(broker_settings, unique):
    """A two-partition topic with 5 records in partition 0 and 3 in partition 1."""
    name = unique("orders")
    admin = ConfluentAdmin({"bootstrap.servers": broker_settings.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker_settings.bootstrap})
    for i in range(5):
        producer.produce(name, f"a{i}".encode(), partition=0)
    for i in range(3):
        producer.produce(name, f"b{i}".encode(), partition=1)
    assert producer.flush(30) == 0
    return name


def consume(consumer: Consumer, count: int) -> list:
    records = []
    for _ in range(200):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            records.append(message)
        if len(records) >= count:
            return records
    raise AssertionError(f"consumed {len(records)} of {count} records")


@pytest.fixture
def active_group(broker_settings, topic, unique):
    """A classic group whose one consumer read everything and committed 3 of partition 0
    and 1 of partition 1."""
    group_id = unique("group")
    consumer = Consumer(
        {
            "bootstrap.servers": broker_settings.bootstrap,
            "group.id": group_id,
            "client.id": "lag-checker",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    consume(consumer, 8)
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 1)], asynchronous=False
    )
    yield group_id, consumer
    consumer.close()


@pytest.fixture
def idle_group(active_group):
    group_id, consumer = active_group
    consumer.close()
    return group_id


def test_describe_shows_members_assignment_and_lag(active_group, viewer_api, topic):
    group_id, _ = active_group

    response = viewer_api.get(f"{URL}{group_id}/")

    assert response.status_code == 200, response.content
    group = response.json()
    assert group["group_id"] == group_id
    assert group["type"] == "classic"
    assert group["state"] == "Stable"
    assert group["protocol_type"] == "consumer"
    [member] = group["members"]
    assert member["client_id"] == "lag-checker"
    assert member["host"]
    assert member["assignment"] == [
        {"topic": topic, "partition": 0},
        {"topic": topic, "partition": 1},
    ]
    assert member["subscribed_topics"] == [topic]
    assert group["lag"] == [
        {"topic": topic, "partition": 0, "committed_offset": 3, "high_watermark": 5, "lag": 2},
        {"topic": topic, "partition": 1, "committed_offset": 1, "high_watermark": 3, "lag": 2},
    ]
    assert group["total_lag"] == 4


def test_consumer_protocol_group_has_member_epochs(broker_settings, topic, viewer_api, unique):
    group_id = unique("kip848")
    consumer = Consumer(
        {
            "bootstrap.servers": broker_settings.bootstrap,
            "group.id": group_id,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        consume(consumer, 8)
        consumer.commit(asynchronous=False)
        group = viewer_api.get(f"{URL}{group_id}/").json()
    finally:
        consumer.close()

    assert group["type"] == "consumer"
    assert group["group_epoch"] >= 1
    [member] = group["members"]
    assert member["member_epoch"] >= 1
    assert group["total_lag"] == 0
    listed = viewer_api.get(URL, {"search": group_id}).json()["results"]
    assert listed == [
        {
            "group_id": group_id,
            "type": "consumer",
            "state": listed[0]["state"],
            "protocol_type": "consumer",
        }
    ]


def test_list_searches_and_filters(active_group, viewer_api):
    group_id, _ = active_group

    found = viewer_api.get(URL, {"search": group_id.upper()})
    classic = viewer_api.get(URL, {"type": "classic", "search": group_id})
    consumer = viewer_api.get(URL, {"type": "consumer", "search": group_id})

    assert found.status_code == 200
    assert found.json()["results"] == [
        {"group_id": group_id, "type": "classic", "state": "Stable", "protocol_type": "consumer"}
    ]
    assert classic.json()["count"] == 1
    assert consumer.json()["count"] == 0
    assert viewer_api.get(URL, {"type": "bogus"}).status_code == 400


def test_committed_offsets(active_group, viewer_api, topic):
    group_id, _ = active_group

    response = viewer_api.get(f"{URL}{group_id}/offsets/")

    assert response.status_code == 200
    assert response.json() == [
        {"topic": topic, "partition": 0, "committed_offset": 3},
        {"topic": topic, "partition": 1, "committed_offset": 1},
    ]


def test_reset_offsets_of_an_idle_group(idle_group, operator_api, topic):
    url = f"{URL}{idle_group}/offsets/"

    dry = operator_api.post(url, {"to": "latest", "dry_run": True}, format="json")
    unchanged = operator_api.get(url).json()
    earliest = operator_api.post(url, {"to": "earliest"}, format="json")
    one = operator_api.post(
        url, {"to": "offset", "value": 4, "topic": topic, "partitions": [0]}, format="json"
    )
    clamped = operator_api.post(
        url, {"to": "offset", "value": 99, "topic": topic, "partitions": [1]}, format="json"
    )
    future = operator_api.post(
        url, {"to": "timestamp", "value": 2**62, "topic": topic}, format="json"
    )

    assert dry.status_code == 200, dry.content
    assert [o["committed_offset"] for o in dry.json()["offsets"]] == [5, 3]
    assert [o["committed_offset"] for o in unchanged] == [3, 1]
    assert earliest.status_code == 200, earliest.content
    assert earliest.json() == {
        "group_id": idle_group,
        "dry_run": False,
        "offsets": [
            {"topic": topic, "partition": 0, "committed_offset": 0},
            {"topic": topic, "partition": 1, "committed_offset": 0},
        ],
    }
    assert one.json()["offsets"] == [{"topic": topic, "partition": 0, "committed_offset": 4}]
    assert clamped.json()["offsets"] == [{"topic": topic, "partition": 1, "committed_offset": 3}]
    assert [o["committed_offset"] for o in future.json()["offsets"]] == [5, 3]
    assert [o["committed_offset"] for o in operator_api.get(url).json()] == [5, 3]
    lag = operator_api.get(f"{URL}{idle_group}/").json()
    assert lag["state"] == "Empty" and lag["members"] == [] and lag["total_lag"] == 0
    dry_entry, entry, *_ = AuditEntry.objects.filter(action="api:group-offsets").order_by("id")
    assert dry_entry.detail["reset"]["dry_run"] is True and "offsets" not in dry_entry.detail
    assert entry.detail["reset"]["to"] == "earliest"
    assert entry.detail["offsets"] == [f"{topic}-0=0", f"{topic}-1=0"]


def test_reset_offsets_of_an_active_group_is_a_conflict(active_group, operator_api):
    group_id, _ = active_group

    response = operator_api.post(f"{URL}{group_id}/offsets/", {"to": "earliest"}, format="json")

    assert response.status_code == 409
    assert response.json()["kafka_error"] == "NON_EMPTY_GROUP"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"to": "yesterday"}, "to"),
        ({}, "to"),
        ({"to": "offset"}, "value"),
        ({"to": "timestamp", "value": -1}, "value"),
        ({"to": "offset", "value": 2**64}, "value"),
        ({"to": "earliest", "partitions": [0]}, "topic"),
        ({"to": "earliest", "topic": "t", "partitions": [-1]}, "partitions"),
        ({"to": "earliest", "topic": "t", "partitions": "zero"}, "partitions"),
        ({"to": "earliest", "topic": "t", "partitions": [2**31]}, "partitions"),
    ],
)
def test_bad_resets_get_field_errors(operator_api, body, field, unique):
    response = operator_api.post(f"{URL}{unique('g')}/offsets/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_reset_of_a_group_without_offsets_needs_a_topic(broker_settings, operator_api, unique):
    response = operator_api.post(f"{URL}{unique('g')}/offsets/", {"to": "latest"}, format="json")

    assert response.status_code == 400
    assert "topic" in response.json()


def test_delete_group(active_group, operator_api, viewer_api):
    group_id, consumer = active_group

    busy = operator_api.delete(f"{URL}{group_id}/")
    consumer.close()
    refused = viewer_api.delete(f"{URL}{group_id}/")
    deleted = operator_api.delete(f"{URL}{group_id}/")
    gone = viewer_api.get(f"{URL}{group_id}/")

    assert busy.status_code == 409
    assert busy.json()["kafka_error"] == "NON_EMPTY_GROUP"
    assert refused.status_code == 403
    assert deleted.status_code == 204
    assert gone.status_code == 404
    assert gone.json()["kafka_error"] == "GROUP_ID_NOT_FOUND"
    entries = AuditEntry.objects.filter(action="api:group-detail").order_by("id")
    assert [(e.username, e.status_code, e.kafka_error) for e in entries] == [
        ("otto", 409, "NON_EMPTY_GROUP"),
        ("vera", 403, ""),
        ("otto", 204, ""),
    ]
    assert entries.last().resource == f"group/{group_id}"


def test_group_configs(broker_settings, operator_api, viewer_api, unique):
    url = f"{URL}{unique('g')}/configs/"

    before = viewer_api.get(url)
    altered = operator_api.patch(
        url, {"set": {"consumer.session.timeout.ms": "50000"}}, format="json"
    )
    reverted = operator_api.patch(url, {"delete": ["consumer.session.timeout.ms"]}, format="json")

    def value(response, name):
        return next(c for c in response.json() if c["name"] == name)

    assert before.status_code == 200
    assert value(before, "consumer.session.timeout.ms")["value"] == "45000"
    assert value(before, "consumer.heartbeat.interval.ms")["value"] == "5000"
    assert altered.status_code == 200, altered.content
    assert value(altered, "consumer.session.timeout.ms") == {
        "name": "consumer.session.timeout.ms",
        "value": "50000",
        "source": "GROUP_CONFIG",
        "read_only": False,
        "sensitive": False,
    }
    assert value(reverted, "consumer.session.timeout.ms")["value"] == "45000"


def test_group_configs_errors(broker_settings, operator_api, viewer_api, unique):
    url = f"{URL}{unique('g')}/configs/"

    unknown = operator_api.patch(url, {"set": {"no.such.config": "1"}}, format="json")
    out_of_range = operator_api.patch(
        url, {"set": {"consumer.heartbeat.interval.ms": "60000"}}, format="json"
    )
    empty = operator_api.patch(url, {}, format="json")
    not_a_map = operator_api.patch(url, {"set": ["a"]}, format="json")
    refused = viewer_api.patch(
        url, {"set": {"consumer.session.timeout.ms": "50000"}}, format="json"
    )

    assert unknown.status_code == 400
    assert unknown.json()["kafka_error"] == "INVALID_CONFIG"
    assert out_of_range.status_code == 400
    assert out_of_range.json()["kafka_error"] == "INVALID_CONFIG"
    assert empty.status_code == 400
    assert not_a_map.status_code == 400 and "set" in not_a_map.json()
    assert refused.status_code == 403


def test_unknown_group_and_no_credentials(broker_settings, viewer_api, client, unique):
    missing = viewer_api.get(f"{URL}{unique('nobody')}/")

    assert missing.status_code == 404
    assert missing.json()["kafka_error"] == "GROUP_ID_NOT_FOUND"
    assert client.get(URL).status_code == 401
    assert client.delete(f"{URL}x/").status_code == 401
