"""The console's quota pages, driven with Django's test client against the session's broker:
the list with its filter, the set form (prefilled, emptied keys removed, validate only, the
broker's refusals shown) and removal behind a confirmation."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from quotas_support import HARMLESS_BYTE_RATE

from api import kafka
from api.models import AuditEntry
from broker.client.models import ClientQuotaAlteration, ClientQuotaEntity

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def described() -> dict:
    return kafka.call(lambda admin: admin.describe_client_quotas())


def test_set_edit_and_remove_quotas(clean_quotas, admin_browser, unique):
    user = unique("cons")
    blank = admin_browser.get("/quotas/set/")
    assert blank.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in blank.content.decode()

    saved = admin_browser.post(
        "/quotas/set/",
        {
            "user": user,
            "default": "client_id",
            "producer_byte_rate": "2048",
            "request_percentage": "25.5",
        },
    )

    entity = ClientQuotaEntity({"user": user, "client-id": None})
    assert saved.status_code == 302, messages_of(saved)
    assert described() == {entity: {"producer_byte_rate": 2048.0, "request_percentage": 25.5}}
    page = admin_browser.get(saved.url).content.decode()
    assert f"user {user}, client id (default)" in page
    assert "<code>producer_byte_rate</code> = 2048" in page
    query = urlencode({"user": user, "default": "client_id"})
    shown_query = query.replace("&", "&amp;")
    assert f"/quotas/set/?{shown_query}" in page and f"/quotas/delete/?{shown_query}" in page

    # The edit link prefills the form; saving it with a key emptied removes that key.
    edit = admin_browser.get(f"/quotas/set/?{query}").content.decode()
    assert 'name="producer_byte_rate" inputmode="decimal" value="2048"' in edit
    assert 'value="client_id" checked' in edit
    assert '<input type="hidden" name="shown" value="request_percentage">' in edit
    admin_browser.post(
        "/quotas/set/",
        {
            "user": user,
            "default": "client_id",
            "producer_byte_rate": "4096",
            "request_percentage": "",
            "shown": ["producer_byte_rate", "request_percentage"],
        },
    )
    assert described() == {entity: {"producer_byte_rate": 4096.0}}

    remove_key = f"/quotas/delete/?{query}&key=producer_byte_rate"
    confirm = admin_browser.get(remove_key)
    assert "Remove the producer_byte_rate quota" in confirm.content.decode()
    removed = admin_browser.post(remove_key, follow=True)
    assert described() == {}
    assert f"Removed the producer_byte_rate quota of user {user}" in " ".join(messages_of(removed))
    assert AuditEntry.objects.filter(
        resource=f"quota/client-id=<default>,user={user}", action="webui:quota-delete"
    ).exists()


def test_refusals_and_validate_only_keep_the_form(clean_quotas, admin_browser, unique):
    user = unique("cons")

    fractional = admin_browser.post("/quotas/set/", {"user": user, "producer_byte_rate": "1.5"})
    with_ip = admin_browser.post(
        "/quotas/set/", {"user": user, "ip": "127.0.0.1", "consumer_byte_rate": "10"}
    )
    both = admin_browser.post(
        "/quotas/set/", {"user": user, "default": "user", "consumer_byte_rate": "10"}
    )
    not_a_number = admin_browser.post("/quotas/set/", {"user": user, "consumer_byte_rate": "x"})
    checked = admin_browser.post(
        "/quotas/set/",
        {"default": "user", "producer_byte_rate": str(HARMLESS_BYTE_RATE), "validate_only": "on"},
    )

    assert fractional.status_code == 400
    assert any("INVALID_REQUEST" in m and "fractional" in m for m in messages_of(fractional))
    assert 'value="1.5"' in fractional.content.decode()
    assert with_ip.status_code == 400
    assert any("IP entity" in m for m in messages_of(with_ip)), messages_of(with_ip)
    assert both.status_code == 400 and "not both" in both.content.decode()
    assert not_a_number.status_code == 400
    assert "A valid number is required." in not_a_number.content.decode()
    assert checked.status_code == 200
    assert messages_of(checked) == ["The broker accepts the quotas of user (default)."]
    assert described() == {}


def test_viewers_see_quotas_but_cannot_change_them(clean_quotas, viewer, unique):
    client_id = unique("app")
    kafka.call(
        lambda admin: admin.alter_client_quotas(
            [
                ClientQuotaAlteration(
                    ClientQuotaEntity({"client-id": client_id}),
                    {"consumer_byte_rate": HARMLESS_BYTE_RATE},
                )
            ]
        )
    )
    browser = Client()
    browser.force_login(viewer)

    page = browser.get("/quotas/", {"any": "client_id"})

    assert page.status_code == 200
    text = page.content.decode()
    assert f"client id {client_id}" in text and 'href="/quotas/"' in text
    assert "/quotas/delete/" not in text
    assert browser.get("/quotas/set/").status_code == 403
    assert browser.post("/quotas/delete/?default=user").status_code == 403
