"""The console's ACL, group, transaction, user and audit pages, driven with Django's test
client logged in as each role, against real brokers and real confluent-kafka clients."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic, ResourceType
from django.template.loader import render_to_string
from django.test import Client

from api.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

PASSWORD = "console-secret-Password-1"


def browser_for(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# --- ACLs ---


def test_create_and_delete_an_acl(acl_settings, admin_browser, confluent_acls, unique):
    txn_id = unique("txn")
    form = admin_browser.get("/acls/new/")
    for field in (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "host",
        "operation",
        "permission_type",
    ):
        assert f'id="id_{field}"' in form.content.decode()
    assert "Create ACL" in form.content.decode()

    invalid = admin_browser.post(
        "/acls/new/",
        {
            "resource_type": "TRANSACTIONAL_ID",
            "resource_name": txn_id,
            "principal": "alice",
            "operation": "WRITE",
            "permission_type": "ALLOW",
        },
    )
    assert invalid.status_code == 400
    assert "User:alice" in invalid.content.decode()  # the principal's field error explains
    created = admin_browser.post(
        "/acls/new/",
        {
            "resource_type": "TRANSACTIONAL_ID",
            "resource_name": txn_id,
            "pattern_type": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "WRITE",
            "permission_type": "ALLOW",
        },
        follow=True,
    )
    assert created.status_code == 200
    assert any("ACL created" in m for m in messages_of(created))
    page = created.content.decode()
    assert txn_id in page and "User:alice" in page
    assert len(confluent_acls(ResourceType.TRANSACTIONAL_ID, txn_id)) == 1

    [delete_link] = re.findall(r'href="(/acls/delete/\?[^"]+)"', page)
    delete_url = delete_link.replace("&amp;", "&")
    confirmation = admin_browser.get(delete_url)
    assert confirmation.status_code == 200
    assert "Delete ACL" in confirmation.content.decode()
    deleted = admin_browser.post(delete_url, follow=True)
    assert any("ACL deleted" in m for m in messages_of(deleted))
    assert confluent_acls(ResourceType.TRANSACTIONAL_ID, txn_id) == []
    actions = list(
        AuditEntry.objects.filter(username="ada")
        .order_by("id")
        .values_list("action", "status_code")
    )
    assert actions == [
        ("webui:acl-create", 400),
        ("webui:acl-create", 302),
        ("webui:acl-delete", 302),
    ]


def test_acl_list_filters_and_bad_filters(acl_settings, viewer, unique):
    browser = browser_for(viewer)

    listed = browser.get("/acls/", {"resource_type": "TOPIC", "operation": "READ"})
    bad = browser.get("/acls/", {"operation": "FLY"})

    assert listed.status_code == 200
    assert 'id="new-acl"' not in listed.content.decode()  # viewers cannot create
    assert bad.status_code == 400
    assert "FLY" in bad.content.decode()
    assert browser.get("/acls/new/").status_code == 403
    assert browser.post("/acls/delete/?" + urlencode({"resource_type": "TOPIC"})).status_code == 403


def test_acl_errors_from_the_broker_are_shown(broker_settings, admin_browser):
    response = admin_browser.get("/acls/")

    assert response.status_code == 200
    assert any("SECURITY_DISABLED" in m for m in messages_of(response))


# --- groups ---


@pytest.fixture
def topic(broker_settings, unique):
    name = unique("orders")
    admin = ConfluentAdmin({"bootstrap.servers": broker_settings.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker_settings.bootstrap})
    for i in range(4):
        producer.produce(name, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    return name


def test_group_pages(broker_settings, admin_browser, topic, unique):
    group_id = unique("console-group")
    consumer = Consumer(
        {
            "bootstrap.servers": broker_settings.bootstrap,
            "group.id": group_id,
            "client.id": "console-consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records = []
    for _ in range(200):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            records.append(message)
            if len(records) == 1:
                consumer.commit(message=message, asynchronous=False)  # offset 1 of 4
        if len(records) == 4:
            break
    try:
        listed = admin_browser.get("/groups/", {"q": group_id})
        detail = admin_browser.get(f"/groups/{group_id}/")
        busy = admin_browser.post(f"/groups/{group_id}/reset/", {"to": "earliest"})
        busy_delete = admin_browser.post(f"/groups/{group_id}/delete/", follow=True)
    finally:
        consumer.close()

    assert group_id in listed.content.decode()
    page = detail.content.decode()
    assert "console-consumer" in page and 'id="members"' in page
    assert re.search(r'<td class="num lag">3</td>', page)
    assert 'id="total-lag">3<' in page
    assert any("NON_EMPTY_GROUP" in m for m in messages_of(busy))
    assert any("NON_EMPTY_GROUP" in m for m in messages_of(busy_delete))

    bad = admin_browser.post(f"/groups/{group_id}/reset/", {"to": "offset"})
    assert bad.status_code == 400 and "Required to reset to offset" in bad.content.decode()
    dry = admin_browser.post(f"/groups/{group_id}/reset/", {"to": "latest", "dry_run": "on"})
    assert 'id="reset-result"' in dry.content.decode()
    reset = admin_browser.post(
        f"/groups/{group_id}/reset/",
        {"to": "offset", "value": "2", "topic": topic, "partitions": "0"},
    )
    assert reset.status_code == 200
    assert any("reset" in m for m in messages_of(reset))
    assert 'id="total-lag">2<' in admin_browser.get(f"/groups/{group_id}/").content.decode()

    configs = admin_browser.get(f"/groups/{group_id}/configs/")
    assert "consumer.session.timeout.ms" in configs.content.decode()
    saved = admin_browser.post(
        f"/groups/{group_id}/configs/",
        {
            "config:consumer.session.timeout.ms": "50000",
            "config:consumer.heartbeat.interval.ms": "5000",
        },
        follow=True,
    )
    assert 'value="50000"' in saved.content.decode()
    unchanged = admin_browser.post(
        f"/groups/{group_id}/configs/", {"config:consumer.session.timeout.ms": "50000"}
    )
    assert unchanged.status_code == 400
    reverted = admin_browser.post(
        f"/groups/{group_id}/configs/", {"reset:consumer.session.timeout.ms": "on"}, follow=True
    )
    assert 'value="45000"' in reverted.content.decode()

    confirmation = admin_browser.get(f"/groups/{group_id}/delete/")
    assert "Delete group" in confirmation.content.decode()
    deleted = admin_browser.post(f"/groups/{group_id}/delete/", follow=True)
    assert any(f"Group {group_id} deleted" in m for m in messages_of(deleted))
    assert "No group matches" in admin_browser.get("/groups/", {"q": group_id}).content.decode()


def test_viewer_sees_groups_but_cannot_change_them(broker_settings, viewer, unique):
    browser = browser_for(viewer)
    group_id = unique("g")

    assert browser.get("/groups/").status_code == 200
    assert browser.get(f"/groups/{group_id}/reset/").status_code == 403
    assert browser.post(f"/groups/{group_id}/delete/").status_code == 403
    assert browser.post(f"/groups/{group_id}/configs/", {}).status_code == 403
    configs = browser.get(f"/groups/{group_id}/configs/")
    assert configs.status_code == 200 and "save-configs" not in configs.content.decode()


# --- transactions ---


def test_transaction_pages_and_abort(broker_settings, operator, topic, unique):
    browser = browser_for(operator)
    transactional_id = unique("txn")
    producer = Producer(
        {"bootstrap.servers": broker_settings.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(30) == 0

    listed = browser.get("/transactions/", {"q": transactional_id, "state": "Ongoing"})
    detail = browser.get(f"/transactions/id/{transactional_id}/")
    producers = browser.get("/transactions/producers/", {"topic": topic, "partition": 0})

    assert transactional_id in listed.content.decode()
    assert "Ongoing" in detail.content.decode()
    assert 'id="txn-age"' in detail.content.decode()
    page = producers.content.decode()
    [producer_id] = re.findall(r'id="abort-(\d+)"', page)
    abort_url = "/transactions/abort/?" + urlencode(
        {"topic": topic, "partition": 0, "producer_id": producer_id}
    )
    confirmation = browser.get(abort_url)
    assert confirmation.status_code == 200
    assert "Abort transaction" in confirmation.content.decode()
    aborted = browser.post(abort_url, follow=True)
    assert any("Aborted the transaction" in m for m in messages_of(aborted))
    assert not re.search(r'id="abort-\d+"', aborted.content.decode())
    again = browser.post(abort_url, follow=True)
    assert any("INVALID_TXN_STATE" in m for m in messages_of(again))
    entry = AuditEntry.objects.filter(action="webui:transaction-abort").order_by("id").first()
    assert entry.status_code == 302 and entry.detail == {"producer_id": int(producer_id)}
    producer.purge()


def test_bad_abort_form_and_roles(broker_settings, operator, viewer):
    bad = browser_for(operator).get(
        "/transactions/abort/", {"topic": "t", "partition": "-1", "producer_id": "x"}
    )
    assert bad.status_code == 400
    assert "producer_id" in bad.context["errors"] and "partition" in bad.context["errors"]
    assert (
        browser_for(viewer)
        .get("/transactions/abort/?topic=t&partition=0&producer_id=1")
        .status_code
        == 403
    )
    page = browser_for(viewer).get(
        "/transactions/producers/", {"topic": "bad topic!", "partition": 0}
    )
    assert page.status_code == 400


def test_hanging_transactions_are_highlighted(rf, admin_user):
    rows = [
        {
            "transactional_id": "stuck",
            "producer_id": 7,
            "state": "Ongoing",
            "age_ms": 120000,
            "transaction_timeout_ms": 60000,
            "hanging": True,
        },
        {
            "transactional_id": "fine",
            "producer_id": 8,
            "state": "Ongoing",
            "age_ms": 1000,
            "transaction_timeout_ms": 60000,
            "hanging": False,
        },
    ]
    html = render_to_string("webui/transactions/list.html", {"page": rows, "q": ""})

    assert re.search(r'<tr class="hanging">\s*<td><a href="/transactions/id/stuck/">', html)
    assert '<a href="/transactions/id/fine/">fine</a></td>' in html
    assert html.count('class="hanging"') == 1
    assert "120 s" in html


# --- users ---


def test_user_pages(broker_settings, admin_browser, unique):
    name = unique("carol")

    bad = admin_browser.post(
        "/users/new/", {"name": name, "iterations": "10", "password": PASSWORD}
    )
    saved = admin_browser.post(
        "/users/new/",
        {"name": name, "mechanism": "SCRAM-SHA-256", "iterations": "4096", "password": PASSWORD},
        follow=True,
    )

    assert bad.status_code == 400
    assert "4096" in bad.content.decode() and PASSWORD not in bad.content.decode()
    page = saved.content.decode()
    assert name in page and "SCRAM-SHA-256" in page and PASSWORD not in page
    delete_url = f"/users/{name}/delete/?mechanism=SCRAM-SHA-256"
    assert f'href="{delete_url}"' in page
    assert "Delete credential" in admin_browser.get(delete_url).content.decode()
    deleted = admin_browser.post(delete_url, follow=True)
    assert any("deleted" in m for m in messages_of(deleted))
    assert "No user matches" in admin_browser.get("/users/", {"q": name}).content.decode()
    assert PASSWORD not in str(list(AuditEntry.objects.values()))


def test_users_and_audit_are_for_admins(broker_settings, operator):
    browser = browser_for(operator)

    home = browser.get("/")
    assert browser.get("/users/").status_code == 403
    assert browser.post("/users/new/", {"name": "x", "password": PASSWORD}).status_code == 403
    assert browser.get("/audit/").status_code == 403
    assert "/users/" not in home.content.decode() and "/audit/" not in home.content.decode()


# --- audit ---


def test_audit_page(admin_browser, operator):
    for i in range(30):
        AuditEntry.objects.create(
            user=operator,
            username="otto",
            method="POST",
            path=f"/groups/g{i}/reset/",
            action="webui:group-reset",
            resource=f"group/g{i}",
            status_code=200,
        )
    AuditEntry.objects.create(
        username="vera",
        method="POST",
        path="/acls/new/",
        action="webui:acl-create",
        status_code=403,
    )

    everything = admin_browser.get("/audit/")
    by_user = admin_browser.get("/audit/", {"user": "vera"})
    second = admin_browser.get("/audit/", {"user": "otto", "page": 2})
    bad = admin_browser.get("/audit/", {"user": "x" * 200})

    assert everything.status_code == 200
    assert "page=2&amp;" not in everything.content.decode()  # no filters to carry
    assert "Page 1 of 2" in everything.content.decode()
    assert "webui:acl-create" in by_user.content.decode()
    assert "webui:group-reset" not in by_user.content.decode()
    assert "user=otto" in second.content.decode()  # the filter survives paging
    assert bad.status_code == 400
