"""The console in a real browser against the whole platform: log in, create a topic, create a
TRANSACTIONAL_ID ACL, and watch the live dashboard follow an open and then committed
transaction without reloading."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from console_support import log_in
from playwright.sync_api import expect

PARTITION_ROW = '[data-topic="{topic}"][data-partition="{partition}"]'


def test_log_in_create_a_topic_and_a_transactional_id_acl(page, platform, screenshot):
    page.goto(f"{platform.url}/login/")
    screenshot("01-login")
    log_in(page, platform)

    page.get_by_role("link", name="Topics", exact=True).click()
    page.fill("#id_name", "browser-orders")
    page.fill("#id_partitions", "3")
    page.get_by_role("button", name="Create topic").click()
    expect(page.get_by_text("browser-orders").first).to_be_visible()
    screenshot("02-topic-created")
    admin = AdminClient({"bootstrap.servers": platform.bootstrap})
    assert len(admin.list_topics(timeout=30).topics["browser-orders"].partitions) == 3

    page.get_by_role("link", name="ACLs", exact=True).click()
    page.get_by_role("link", name="Create ACL").click()
    page.select_option("#id_resource_type", "TRANSACTIONAL_ID")
    page.fill("#id_resource_name", "orders-app-")
    page.select_option("#id_pattern_type", "PREFIXED")
    page.fill("#id_principal", "User:alice")
    page.select_option("#id_operation", "WRITE")
    page.select_option("#id_permission_type", "ALLOW")
    screenshot("03-acl-form")
    page.get_by_role("button", name="Create ACL").click()
    expect(page.get_by_text("orders-app-").first).to_be_visible()
    screenshot("04-transactional-id-acl")
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TRANSACTIONAL_ID,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    assert [(b.name, b.principal, b.operation, b.resource_pattern_type) for b in found] == [
        ("orders-app-", "User:alice", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    ]


def test_live_dashboard_follows_a_transaction(page, platform, screenshot):
    topic = "browser-payments"
    admin = AdminClient({"bootstrap.servers": platform.bootstrap})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    log_in(page, platform)
    row = page.locator(PARTITION_ROW.format(topic=topic, partition=0))
    expect(row).to_be_visible()
    sample = page.locator("#last-sample").text_content()

    producer = Producer({"bootstrap.servers": platform.bootstrap, "transactional.id": "browser-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"payment {i}".encode(), partition=0)
    producer.flush(30)

    # The page is never reloaded: only websocket samples can move these cells.
    expect(row.locator(".hw")).to_have_text("5")
    expect(row.locator(".lso")).to_have_text("0")
    expect(page.locator("#last-sample")).not_to_have_text(sample or "")
    expect(page.locator(".hanging, [data-transactional-id='browser-tx']").first).to_be_visible()
    screenshot("05-dashboard-open-transaction")

    producer.commit_transaction(30)
    # The commit marker takes an offset: LSO and HW meet past it.
    expect(row.locator(".hw")).to_have_text("6")
    expect(row.locator(".lso")).to_have_text("6")
    screenshot("06-dashboard-committed")


def test_create_start_watch_and_stop_a_pipeline(page, platform, screenshot):
    source, sink = "browser-clicks", "browser-clicks-upper"
    admin = AdminClient({"bootstrap.servers": platform.bootstrap})
    for name in (source, sink):
        admin.create_topics([NewTopic(name, 2)])[name].result(30)
    log_in(page, platform)
    page.get_by_role("link", name="Pipelines", exact=True).click()
    page.get_by_role("link", name="New pipeline").click()
    page.fill("#id_name", "clicks-upper")
    page.fill("#id_source_topics", source)
    page.fill("#id_starting_offsets", "earliest")
    # Checked by Spark before saving: a column the source does not have is refused.
    page.fill("#id_transformation", "SELECT key, upper(cast(nope AS string)) AS value FROM source")
    page.fill("#id_sink_topic", sink)
    page.fill("#id_trigger_interval_ms", "500")
    # The SQL checker's JVM, started when the form was opened, may still be starting.
    page.get_by_role("button", name="Create pipeline").click(timeout=120_000)
    expect(page.locator(".field-errors")).to_contain_text("`nope` cannot be resolved")
    screenshot("07-pipeline-sql-refused")
    page.fill("#id_transformation", "SELECT key, upper(cast(value AS string)) AS value FROM source")
    page.get_by_role("button", name="Create pipeline").click()
    expect(page.get_by_role("heading", name="clicks-upper")).to_be_visible()

    page.get_by_role("button", name="Start").click()
    producer = Producer({"bootstrap.servers": platform.bootstrap})
    for i in range(200):
        producer.produce(source, f"click {i}".encode())
    producer.flush(30)
    # Not reloaded: the dashboards' websocket carries the run's progress into the page.
    expect(page.locator("#pipeline-status")).to_have_text("running", timeout=120_000)
    expect(page.locator("#pipeline-rows-in")).to_have_text("200", timeout=120_000)
    screenshot("08-pipeline-running")

    page.get_by_role("button", name="Stop").click()
    # Still not reloaded: the run's end comes through the page's script too.
    expect(page.locator("#pipeline-status")).to_have_text("stopped", timeout=120_000)
    page.reload()
    expect(page.get_by_role("button", name="Start")).to_be_visible()
    screenshot("09-pipeline-stopped")


def test_a_quota_set_in_the_console_throttles_on_the_dashboard(page, platform, screenshot):
    topic, client_id = "browser-quota", "browser-slow-client"
    admin = AdminClient({"bootstrap.servers": platform.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    log_in(page, platform)
    page.get_by_role("link", name="Quotas", exact=True).click()
    page.get_by_role("link", name="Set quotas").click()
    page.fill("#id_client_id", client_id)
    page.fill("#id_producer_byte_rate", "1024")
    page.get_by_role("button", name="Save quotas").click()
    expect(page.get_by_role("cell", name=f"client id {client_id}")).to_be_visible()
    screenshot("10-quota-set")

    page.get_by_role("link", name="Dashboard").click()
    # 20 kB in one request: twice the quota over Kafka's shortest quota window (10 s).
    producer = Producer(
        {"bootstrap.servers": platform.bootstrap, "client.id": client_id, "linger.ms": 200}
    )
    for _ in range(20):
        producer.produce(topic, b"x" * 1000)
    producer.flush(30)

    # Not reloaded: the websocket's samples fill the quota table.
    row = page.locator("#quota-throttling tr.throttled", has_text=client_id)
    expect(row.locator(".quota-type")).to_have_text("produce")
    expect(row.locator(".limit")).to_have_text("1.0 KiB/s")
    screenshot("11-dashboard-quota-throttling")
