"""Transactions through the REST API, against a real confluent-kafka transactional producer
left with its transaction open: listed Ongoing with its age, described, its producer state
found on the partition, and the open transaction aborted the way kafka-transactions aborts a
hanging one."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from api.models import AuditEntry
from api.views.transactions import with_age
from broker.client.models import TransactionDescription

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

URL = "/api/v1/transactions/"


@pytest.fixture
def topic(broker_settings, unique):
    name = unique("payments")
    admin = ConfluentAdmin({"bootstrap.servers": broker_settings.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


@pytest.fixture
def open_transaction(broker_settings, topic, unique):
    """A transactional producer that wrote 2 records to partition 0 and never ends its
    transaction."""
    transactional_id = unique("txn")
    producer = Producer(
        {"bootstrap.servers": broker_settings.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"one", partition=0)
    producer.produce(topic, b"two", partition=0)
    assert producer.flush(30) == 0
    yield transactional_id
    producer.purge()


def test_open_transaction_is_listed_ongoing_with_its_age(open_transaction, viewer_api):
    ongoing = viewer_api.get(URL, {"state": "Ongoing", "search": open_transaction})
    everything = viewer_api.get(URL)
    empty = viewer_api.get(URL, {"state": "Empty", "search": open_transaction})

    assert ongoing.status_code == 200, ongoing.content
    [txn] = ongoing.json()["results"]
    assert txn["transactional_id"] == open_transaction
    assert txn["state"] == "Ongoing"
    assert txn["producer_id"] >= 0 and txn["producer_epoch"] >= 0
    assert txn["transaction_timeout_ms"] == 60000
    assert txn["transaction_start_time_ms"] > 0
    assert txn["age_ms"] >= 0
    assert txn["hanging"] is False
    assert open_transaction in [t["transactional_id"] for t in everything.json()["results"]]
    assert empty.json()["count"] == 0
    assert viewer_api.get(URL, {"hanging": "true", "search": open_transaction}).json()["count"] == 0


def test_describe_transaction(open_transaction, viewer_api, topic):
    response = viewer_api.get(f"{URL}{open_transaction}/")

    assert response.status_code == 200
    txn = response.json()
    assert txn["state"] == "Ongoing"
    assert txn["coordinator_id"] >= 0
    assert txn["partitions"] == [{"topic": topic, "partition": 0}]


def test_unknown_transactional_id_is_not_found(broker_settings, viewer_api, unique):
    response = viewer_api.get(f"{URL}{unique('nobody')}/")

    assert response.status_code == 404
    assert response.json()["kafka_error"] == "TRANSACTIONAL_ID_NOT_FOUND"


def test_abort_a_hanging_transaction(
    open_transaction, operator_api, viewer_api, topic, broker_settings
):
    [producer] = viewer_api.get(f"{URL}producers/", {"topic": topic, "partition": 0}).json()
    assert producer["current_transaction_start_offset"] == 0
    body = {"topic": topic, "partition": 0, "producer_id": producer["producer_id"]}

    refused = viewer_api.post(f"{URL}abort/", body, format="json")
    aborted = operator_api.post(f"{URL}abort/", body, format="json")
    again = operator_api.post(f"{URL}abort/", body, format="json")

    assert refused.status_code == 403
    assert aborted.status_code == 200, aborted.content
    assert aborted.json() == body
    [after] = viewer_api.get(f"{URL}producers/", {"topic": topic, "partition": 0}).json()
    assert after["current_transaction_start_offset"] == -1
    assert again.status_code == 409
    assert again.json()["kafka_error"] == "INVALID_TXN_STATE"
    # The partition's last stable offset moved past the aborted records and its ABORT marker.
    consumer = Consumer(
        {
            "bootstrap.servers": broker_settings.bootstrap,
            "group.id": "lso-check",
            "isolation.level": "read_committed",
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    assert high == 3
    entry = AuditEntry.objects.get(action="api:transaction-abort", status_code=200)
    assert entry.resource == f"partition/{topic}-0"
    assert entry.detail == {"producer_id": producer["producer_id"]}


def test_producers_of_an_unknown_partition(broker_settings, viewer_api, unique):
    response = viewer_api.get(f"{URL}producers/", {"topic": unique("nope"), "partition": 0})

    assert response.status_code == 404
    assert response.json()["kafka_error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize(
    "query, field",
    [
        ({"partition": 0}, "topic"),
        ({"topic": "t"}, "partition"),
        ({"topic": "t", "partition": -1}, "partition"),
        ({"topic": "t", "partition": "x"}, "partition"),
        ({"topic": "t", "partition": 2**31}, "partition"),
        ({"topic": "bad topic!", "partition": 0}, "topic"),
    ],
)
def test_bad_partitions_get_field_errors(viewer_api, operator_api, query, field):
    listed = viewer_api.get(f"{URL}producers/", query)
    aborted = operator_api.post(f"{URL}abort/", query | {"producer_id": 1}, format="json")

    assert listed.status_code == 400 and field in listed.json()
    assert aborted.status_code == 400 and field in aborted.json()


def test_bad_abort_and_filters(operator_api, viewer_api, client):
    for producer_id in (-1, "x", 2**63, None):
        response = operator_api.post(
            f"{URL}abort/",
            {"topic": "t", "partition": 0, "producer_id": producer_id},
            format="json",
        )
        assert response.status_code == 400 and "producer_id" in response.json()
    assert "state" in viewer_api.get(URL, {"state": "Sleeping"}).json()
    assert client.get(URL).status_code == 401
    assert client.post(f"{URL}abort/", {}).status_code == 401


def test_hanging_is_ongoing_past_the_transaction_timeout():
    def described(state: str, start: int) -> TransactionDescription:
        return TransactionDescription("t", 1, state, 7, 0, 60000, start, [("t", 0)])

    now = 1_000_000_000
    old = with_age(described("Ongoing", now - 60001), now)
    young = with_age(described("Ongoing", now - 60000), now)
    finished = with_age(described("CompleteCommit", now - 600000), now)
    idle = with_age(described("Empty", -1), now)

    assert (old["age_ms"], old["hanging"]) == (60001, True)
    assert (young["age_ms"], young["hanging"]) == (60000, False)
    assert finished["hanging"] is False
    assert (idle["age_ms"], idle["transaction_start_time_ms"], idle["hanging"]) == (
        None,
        None,
        False,
    )
