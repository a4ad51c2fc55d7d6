"""Headless Chromium for the browser tests, offline: one launcher and one page opener.

Every browser test (``tests/test_site.py``, ``tests/test_interactive_browser.py``,
``tests/test_interactive_pages.py``) and ``tools/page_report.py`` open pages through these, so
all of them run the same browser with the same flags and block every request that would leave
the machine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
#: URL schemes a page may load: the files of the site (or test page) and inline data.
LOCAL = ("file://", "data:", "blob:")


def skip_or_fail(reason: str) -> None:
    """Skip the test for ``reason``; fail it on CI, which installs Chromium and builds the
    site (a skip there would hide a broken install)."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@contextlib.contextmanager
def chromium(required: Path | None = None, hint: str = "") -> Iterator[object]:
    """A launched headless Chromium (a playwright ``Browser``), closed on exit.

    Skips (fails on CI) when Chromium is missing, or when ``required`` (e.g. the built site's
    ``index.html``) does not exist; ``hint`` says how to make it.
    """
    if not CHROMIUM.exists():
        skip_or_fail(f"{CHROMIUM} is missing (apt-get install chromium)")
    if required is not None and not required.exists():
        skip_or_fail(f"{required} is missing{': ' + hint if hint else ''}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def file_size(url: str) -> int:
    """The size in bytes of the local file a ``file://`` URL names (0 for anything else)."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        return 0
    path = Path(unquote(parts.path))
    return path.stat().st_size if path.is_file() else 0


def page_weight(requested: list[str]) -> tuple[int, int]:
    """(first, own): the bytes of every distinct file a first visit loaded, and of those that
    are the page's own (its HTML and images, not the shared ``_static`` files a reader's
    browser has cached after the first page)."""
    files = {u.split("?")[0].split("#")[0] for u in requested if u.startswith("file://")}
    own = [u for u in files if "/_static/" not in u]
    return sum(file_size(u) for u in files), sum(file_size(u) for u in own)


def open_offline(browser, url: str, errors: list[str] | None = None,
                 viewport: dict[str, int] | None = None, requested: list[str] | None = None):
    """Open ``url`` with every non-file request blocked; return (page, blocked URLs).

    Console errors and uncaught page errors are appended to ``errors`` when it is given, and
    every URL the page requests to ``requested``. ``viewport`` is e.g.
    ``{"width": 390, "height": 844}`` (Chromium's default otherwise).
    """
    page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
    blocked: list[str] = []
    if requested is not None:
        page.on("request", lambda r: requested.append(r.url))
    if errors is not None:
        page.on("console",
                lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))

    def gate(route):
        if route.request.url.startswith(LOCAL):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", gate)
    page.goto(url, wait_until="load")
    return page, blocked
