"""Console pages for topics, records and the cluster, with Django's test client against a real
broker; confluent-kafka checks what the forms did."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import reverse

from api.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def confluent(broker_settings):
    return AdminClient({"bootstrap.servers": broker_settings.bootstrap})


@pytest.fixture
def topic(confluent, unique):
    name = unique("ui")
    confluent.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    return name


def text(response) -> str:
    return response.content.decode()


def test_pages_need_a_login(broker_settings, topic):
    response = Client().get(reverse("webui:topic-list"))

    assert response.status_code == 302
    assert reverse("webui:login") in response["Location"]


def test_nav_links_to_topics_and_cluster(admin_browser, broker_settings):
    page = text(admin_browser.get(reverse("webui:home")))

    assert reverse("webui:topic-list") in page
    assert reverse("webui:cluster") in page


def test_topic_list_searches_and_offers_the_create_form(admin_browser, topic):
    response = admin_browser.get(reverse("webui:topic-list"), {"q": topic})

    assert response.status_code == 200
    page = text(response)
    assert reverse("webui:topic-detail", args=[topic]) in page
    for field in ('id="id_name"', 'id="id_partitions"', 'id="id_replication_factor"'):
        assert field in page
    assert 'name="configs"' in page


def test_topic_list_paginates(admin_browser, confluent, unique):
    prefix = unique("pg")
    names = [f"{prefix}-{i:02d}" for i in range(26)]
    for future in confluent.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=30)

    first = text(admin_browser.get(reverse("webui:topic-list"), {"q": prefix}))
    second = text(admin_browser.get(reverse("webui:topic-list"), {"q": prefix, "page": 2}))

    assert "Page 1 of 2" in first
    assert names[0] in first and names[25] not in first
    assert names[25] in second


def test_viewer_sees_no_create_form_and_cannot_create(viewer_browser, broker_settings, unique):
    page = text(viewer_browser.get(reverse("webui:topic-list")))
    response = viewer_browser.post(reverse("webui:topic-create"), {"name": unique()})

    assert 'id="id_name"' not in page
    assert response.status_code == 403


def test_create_topic_flow(admin_browser, admin_user, confluent, unique):
    name = unique("made")

    response = admin_browser.post(
        reverse("webui:topic-create"),
        {
            "name": name,
            "partitions": "3",
            "replication_factor": "",
            "configs": "retention.ms=86400000\n\ncleanup.policy=compact\n",
        },
        follow=True,
    )

    assert response.redirect_chain[-1][0] == reverse("webui:topic-detail", args=[name])
    assert f"Topic {name} created." in text(response)
    assert len(confluent.list_topics(name, timeout=30).topics[name].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = confluent.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    entry = AuditEntry.objects.get(resource=f"topic/{name}")
    assert (entry.user, entry.action, entry.status_code) == (admin_user, "webui:topic-create", 302)


def test_create_topic_shows_field_errors(admin_browser, broker_settings):
    response = admin_browser.post(
        reverse("webui:topic-create"),
        {"name": "no spaces", "partitions": "0", "configs": "just-a-word"},
    )

    assert response.status_code == 400
    page = text(response)
    assert "Topic names use only ASCII letters" in page
    assert "at least one partition" in page
    assert "Line 1: expected key=value" in page
    assert 'value="no spaces"' in page


def test_create_existing_topic_shows_the_kafka_error(admin_browser, topic):
    response = admin_browser.post(reverse("webui:topic-create"), {"name": topic})

    assert response.status_code == 200
    assert "TOPIC_ALREADY_EXISTS" in text(response)


def test_detail_marks_an_lso_below_the_high_watermark(
    admin_browser, topic, broker_settings, unique
):
    producer = Producer(
        {"bootstrap.servers": broker_settings.bootstrap, "transactional.id": unique("tx")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=1)
    assert producer.flush(30) == 0
    try:
        response = admin_browser.get(reverse("webui:topic-detail", args=[topic]))
    finally:
        producer.abort_transaction(30)

    assert response.status_code == 200
    page = text(response)
    assert 'id="partitions"' in page
    assert page.count('class="lso-behind"') == 1
    assert "open transaction" in page


def test_detail_of_unknown_topic_is_404_with_the_kafka_error(
    admin_browser, broker_settings, unique
):
    response = admin_browser.get(reverse("webui:topic-detail", args=[unique("missing")]))

    assert response.status_code == 404
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text(response)


def test_delete_asks_then_deletes(admin_browser, topic, confluent):
    url = reverse("webui:topic-delete", args=[topic])

    confirmation = admin_browser.get(url)
    still_there = topic in confluent.list_topics(timeout=30).topics
    response = admin_browser.post(url, follow=True)

    assert confirmation.status_code == 200
    assert "Delete topic" in text(confirmation)
    assert still_there
    assert response.redirect_chain[-1][0] == reverse("webui:topic-list")
    assert topic not in confluent.list_topics(timeout=30).topics
    assert AuditEntry.objects.get(resource=f"topic/{topic}").action == "webui:topic-delete"


def test_viewer_cannot_delete(viewer_browser, topic):
    assert viewer_browser.post(reverse("webui:topic-delete", args=[topic])).status_code == 403


def test_configs_edit_form_sets_and_resets(admin_browser, topic, confluent):
    url = reverse("webui:topic-configs", args=[topic])
    page = text(admin_browser.get(url))

    set_response = admin_browser.post(url, {"config:retention.ms": "3600000"}, follow=True)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    after_set = confluent.describe_configs([resource])[resource].result(timeout=30)
    admin_browser.post(url, {"reset:retention.ms": "on", "extra": "segment.ms=7200000"})
    after_reset = confluent.describe_configs([resource])[resource].result(timeout=30)

    assert 'name="config:retention.ms"' in page
    assert "Configs of topic" in text(set_response)
    assert after_set["retention.ms"].value == "3600000"
    assert after_reset["retention.ms"].value != "3600000"
    assert after_reset["segment.ms"].value == "7200000"


def test_configs_invalid_value_shows_the_kafka_error(admin_browser, topic):
    response = admin_browser.post(
        reverse("webui:topic-configs", args=[topic]), {"config:retention.ms": "soon"}
    )

    assert "INVALID_CONFIG" in text(response)


def test_configs_bad_extra_lines_show_field_errors(admin_browser, topic):
    response = admin_browser.post(reverse("webui:topic-configs", args=[topic]), {"extra": "oops"})

    assert response.status_code == 400
    assert "Line 1: expected key=value" in text(response)


def test_viewer_reads_configs_but_cannot_post(viewer_browser, topic):
    url = reverse("webui:topic-configs", args=[topic])

    page = text(viewer_browser.get(url))

    assert "retention.ms" in page and 'name="config:retention.ms"' not in page
    assert viewer_browser.post(url, {"config:retention.ms": "1"}).status_code == 403


def test_add_partitions_form(admin_browser, topic, confluent):
    url = reverse("webui:topic-partitions", args=[topic])

    form = admin_browser.get(url)
    invalid = admin_browser.post(url, {"count": "zero"})
    shrink = admin_browser.post(url, {"count": "1"})
    response = admin_browser.post(url, {"count": "5"}, follow=True)

    assert 'id="id_count"' in text(form)
    assert invalid.status_code == 400 and "valid integer" in text(invalid)
    assert "INVALID_PARTITIONS" in text(shrink)
    assert response.redirect_chain[-1][0] == reverse("webui:topic-detail", args=[topic])
    assert len(confluent.list_topics(topic, timeout=30).topics[topic].partitions) == 5


def test_records_browser_shows_records(admin_browser, topic, broker_settings):
    producer = Producer({"bootstrap.servers": broker_settings.bootstrap})
    producer.produce(topic, key=b"k", value=b"hello console", partition=1, headers=[("h", b"1")])
    producer.produce(topic, value=b"\xff\xfe", partition=1)
    assert producer.flush(30) == 0

    response = admin_browser.get(
        reverse("webui:topic-records", args=[topic]), {"partition": "1", "offset": "0"}
    )

    assert response.status_code == 200
    page = text(response)
    assert "hello console" in page
    assert "h=1" in page
    assert "//4=" in page  # base64 of ff fe
    assert 'id="next-records"' in page


def test_records_browser_shows_query_errors(admin_browser, topic):
    response = admin_browser.get(
        reverse("webui:topic-records", args=[topic]), {"offset": "-3", "timestamp": "when"}
    )

    assert response.status_code == 400
    page = text(response)
    assert "greater than or equal to 0" in page
    assert "ISO 8601" in page


def test_produce_form_writes_a_record_and_shows_it(admin_browser, topic):
    url = reverse("webui:topic-records", args=[topic])

    response = admin_browser.post(
        url,
        {"partition": "0", "key": "", "value": "from the form", "headers": "via=console"},
        follow=True,
    )

    assert "Produced to partition 0 at offset 0." in text(response)
    assert "from the form" in text(response)
    assert "via=console" in text(response)
    assert AuditEntry.objects.get(resource=f"topic/{topic}").action == "webui:topic-records"


def test_produce_form_shows_field_errors(admin_browser, topic):
    response = admin_browser.post(
        reverse("webui:topic-records", args=[topic]),
        {"partition": "", "value": "%%", "value_encoding": "base64", "headers": "novalue"},
    )

    assert response.status_code == 400
    page = text(response)
    assert "Not valid base64." in page
    assert "Line 1: expected key=value" in page


def test_viewer_browses_but_cannot_produce(viewer_browser, topic):
    url = reverse("webui:topic-records", args=[topic])

    page = text(viewer_browser.get(url))

    assert 'id="browse-records"' in page and 'id="produce-record"' not in page
    assert viewer_browser.post(url, {"value": "x"}).status_code == 403


def test_cluster_page_lists_brokers_and_their_log_dirs(viewer_browser, confluent, control_broker):
    metadata = confluent.list_topics(timeout=30)

    response = viewer_browser.get(reverse("webui:cluster"))

    assert response.status_code == 200
    page = text(response)
    assert metadata.cluster_id in page
    for broker_id in metadata.brokers:
        assert reverse("webui:broker-configs", args=[broker_id]) in page
    assert 'id="log-dirs"' in page
    assert str(control_broker.log_dir.absolute()) in page


def test_topic_pages_show_sizes_on_disk(viewer_browser, topic, broker_settings):
    producer = Producer({"bootstrap.servers": broker_settings.bootstrap})
    for _ in range(20):
        producer.produce(topic, b"x" * 100, partition=0)
    assert producer.flush(30) == 0

    listed = viewer_browser.get(reverse("webui:topic-list"), {"q": topic})
    detail = viewer_browser.get(reverse("webui:topic-detail", args=[topic]))

    size = listed.context["page"][0].size_bytes
    assert size > 2000
    assert filesizeformat(size) in text(listed)
    assert [row.size_bytes for row in detail.context["partitions"]] == [size, 0]
    assert detail.context["size_bytes"] == size


def test_broker_configs_editable_by_admins_only(admin_browser, viewer_browser, confluent, operator):
    broker_id = confluent.list_topics(timeout=30).controller_id
    url = reverse("webui:broker-configs", args=[broker_id])
    operator_browser = Client()
    operator_browser.force_login(operator)

    viewer_page = text(viewer_browser.get(url))
    admin_page = text(admin_browser.get(url))
    refused = operator_browser.post(url, {"config:log.retention.ms": "1"})
    admin_browser.post(url, {"config:log.retention.ms": "7200000"})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    after_set = confluent.describe_configs([resource])[resource].result(timeout=30)
    admin_browser.post(url, {"reset:log.retention.ms": "on"})
    after_reset = confluent.describe_configs([resource])[resource].result(timeout=30)

    assert "num.partitions" in viewer_page and 'id="save-configs"' not in viewer_page
    assert 'id="save-configs"' in admin_page
    assert refused.status_code == 403
    assert after_set["log.retention.ms"].value == "7200000"
    assert after_reset["log.retention.ms"].value != "7200000"


def test_unknown_broker_configs_is_404(admin_browser, broker_settings):
    response = admin_browser.get(reverse("webui:broker-configs", args=[4242]))

    assert response.status_code == 404
