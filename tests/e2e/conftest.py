"""A platform and a real browser: Debian's chromium driven by Playwright. Screenshots are test
artifacts under var/test-artifacts/ (FJORD_TEST_ARTIFACTS moves them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
from broker_process import REPO
from platform_process import Platform
from postgres_database import throwaway_database

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium keeps dialling Google's hosts, which this
# closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("FJORD_TEST_ARTIFACTS", REPO / "var" / "test-artifacts"))


# Module scope throughout: Playwright's sync API keeps an event loop running in the main thread
# while it is open, which would break every asyncio test collected after these.
@pytest.fixture(scope="module")
def platform_database():
    """A PostgreSQL database of its own for the platform, dropped afterwards."""
    with throwaway_database("fjord_e2e") as url:
        yield url


def run_platform(tmp_path_factory, database_url: str, brokers: int = 1):
    """The production shape: PostgreSQL, Redis, worker and beat; several brokers form a
    cluster on the platform's database."""
    # A Redis database of its own (2 to 15: the tests' own settings use 1), so that a second
    # run beside this one takes none of its tasks; of pytest-xdist's two workers, gw0 takes
    # an even one and gw1 an odd one.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    redis_url = f"redis://127.0.0.1:6379/{2 + os.getpid() % 7 * 2 + worker % 2}"
    redis.Redis.from_url(redis_url).flushdb()
    running = Platform(
        tmp_path_factory.mktemp("platform"),
        brokers,
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
    ).start()
    yield running
    assert running.stop() == 0, "".join(running.output[-200:])


@pytest.fixture(scope="module")
def platform(tmp_path_factory, platform_database):
    yield from run_platform(tmp_path_factory, platform_database)


@pytest.fixture(scope="module")
def cluster_platform(tmp_path_factory, platform_database):
    """`python -m control.launch --brokers 3`."""
    yield from run_platform(tmp_path_factory, platform_database, brokers=3)


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system-deps` installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, request):
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    # The last state of every test, passed or failed, for whoever reads the run.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"), full_page=True)
    context.close()


@pytest.fixture
def screenshot(page):
    def take(name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
