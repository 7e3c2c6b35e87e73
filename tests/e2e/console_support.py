"""What the browser tests do on every console: log in."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect


def log_in(page: Page, platform) -> None:
    page.goto(f"{platform.url}/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.fill("#id_username", platform.username)
    page.fill("#id_password", platform.password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("link", name="Dashboard")).to_be_visible()
