"""Real-browser tests: headless Debian Chromium driven by selenium.

Skipped, with the reason, when Chromium or chromedriver is missing (install them
with ``apt-get install chromium chromium-driver``); ``RP_REQUIRE_BROWSER=1`` (set
by ``.ci/run`` once they are installed) turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _binaries() -> tuple[str | None, str | None]:
    browser = next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)
    return browser, shutil.which("chromedriver")


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    browser, driver = _binaries()
    if browser and driver:
        return
    missing = " and ".join(
        name
        for name, found in (("chromium", browser), ("chromedriver", driver))
        if not found
    )
    reason = (
        f"{missing} not installed: the playground was NOT tested in a browser "
        "(apt-get install chromium chromium-driver)"
    )
    marked = [item for item in items if item.get_closest_marker("browser")]
    if marked and os.environ.get("RP_REQUIRE_BROWSER"):
        raise pytest.UsageError(f"RP_REQUIRE_BROWSER is set but {reason}")
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture()
def browser() -> Iterator[Any]:
    """A headless Chromium that keeps its console log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = _binaries()
    assert binary and driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1600",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()
