"""A three-broker cluster as `python -m control.launch --brokers 3` starts it (DATABASE_URL
holding the brokers' metadata too), in a real browser: the dashboard adds up every broker's
metrics and shows what held each one's event loop, the Brokers page lists the brokers with the
controller marked, and a topic replicated on all three shows its replicas and ISR; a broker
that stops answering is shown down and since when, and up again once it answers."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from console_support import log_in
from playwright.sync_api import expect

NODES = ["1", "2", "3"]
# As the dashboard formats them (charts.js' formatNumber).
COUNT = re.compile(r"^\d+(\.\d+)?[kMG]?$")
MILLISECONDS = re.compile(r"^\d+(\.\d+)?[kMG]? ms$")


def broker_ids(text: str | None) -> list[str]:
    return sorted((text or "").split(", "))


def test_brokers_page_and_a_replicated_topic(page, cluster_platform, screenshot):
    topic = "browser-replicated"
    admin = AdminClient({"bootstrap.servers": cluster_platform.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    log_in(page, cluster_platform)

    # Samples of all three endpoints: every broker answers, no partition lacks a replica.
    expect(page.locator("#broker-status")).to_have_text("reachable")
    expect(page.locator("#stat-under-replicated")).to_have_text("0")
    expect(page.locator("#stat-offline")).to_have_text("0")
    # What held each broker's event loop: a row of its own, figures rather than n/a.
    loops = page.locator("#event-loop tbody tr")
    expect(loops).to_have_count(3)
    expect(loops.locator(".lag-max")).to_have_text([MILLISECONDS] * 3)
    expect(loops.locator(".lag-mean")).to_have_text([MILLISECONDS] * 3)
    expect(loops.locator(".gen2")).to_have_text([COUNT] * 3)
    expect(loops.locator(".collections")).to_have_text([COUNT] * 3)
    screenshot("12-cluster-dashboard")

    page.get_by_role("link", name="Brokers", exact=True).click()
    rows = page.locator("#brokers tbody tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-broker-id") for i in range(3)] == NODES
    expect(rows.locator('[data-field="status"]')).to_have_text(["alive"] * 3)
    controller = page.locator("#controller-id").text_content()
    expect(page.locator(".controller-tag:visible")).to_have_count(1)
    expect(page.locator(f'tr[data-broker-id="{controller}"] .controller-tag')).to_be_visible()
    expect(page.locator("#log-dirs tbody tr")).to_have_count(3)
    # The page's script asks the API again every few seconds and finds the same cluster.
    expect(page.locator("#brokers-refreshed")).to_contain_text("Updated", timeout=30_000)
    expect(rows.locator('[data-field="status"]')).to_have_text(["alive"] * 3)
    expect(page.locator(".controller-tag:visible")).to_have_count(1)
    screenshot("13-cluster-brokers")

    page.get_by_role("link", name="Topics", exact=True).click()
    page.get_by_role("link", name=topic, exact=True).click()
    partitions = page.locator("#partitions tbody tr")
    expect(partitions).to_have_count(3)
    for index in range(3):
        row = partitions.nth(index)
        assert broker_ids(row.locator(".replicas").text_content()) == NODES
        assert broker_ids(row.locator(".isr").text_content()) == NODES
    expect(page.locator(".isr.under-replicated")).to_have_count(0)
    screenshot("14-cluster-replicated-topic")


def broker_pid(launcher_pid: int, node_id: int) -> int:
    """The process id of the launcher's child `python -m broker` with that node id."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            # The parent's id follows the command's name, which ends with the last ")".
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == launcher_pid and f"node.id={node_id}".encode() in argv:
            return int(entry.name)
    raise LookupError(f"no broker {node_id} under the launcher {launcher_pid}")


def test_a_broker_that_stops_answering_is_shown_down_since_when(page, cluster_platform):
    log_in(page, cluster_platform)
    status = page.locator("#broker-status")
    expect(status).to_have_text("reachable")
    # Stopped, not killed: the launcher would restart a killed broker within a second.
    pid = broker_pid(cluster_platform.proc.pid, 3)
    os.kill(pid, signal.SIGSTOP)
    try:
        expect(status).to_have_text(re.compile(r"^partly reachable \(1 down since .+\)$"))
        # Until the cluster fences it, the page waits for the stopped broker's log dirs.
        page.goto(f"{cluster_platform.url}/cluster/", timeout=120_000)
        down = page.locator("#brokers-down")
        expect(down).to_contain_text("down since")
        metrics_port = cluster_platform.metrics_port + 2
        expect(down).to_contain_text(f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        os.kill(pid, signal.SIGCONT)
    # The page follows by itself once a sample finds the broker answering again.
    expect(page.locator("#brokers-down")).to_have_count(0, timeout=90_000)
    expect(page.locator("#brokers tbody tr")).to_have_count(3)
    page.get_by_role("link", name="Dashboard", exact=True).click()
    expect(status).to_have_text("reachable")
