"""Headless Chromium for the browser tests, offline: one launcher and one page opener.

Every browser test (``tests/test_site.py``, ``tests/test_interactive_browser.py``,
``tests/test_interactive_pages.py``) and ``tools/page_report.py`` open pages through these, so
all of them run the same browser with the same flags and block every request that would leave
the machine.

The tests share one Chromium per pytest process (the session fixture ``chromium_session``,
made visible to every test module by ``tests/conftest.py``), and open each page at each width
once, running every check of that page there: ``Problems`` collects the failure of each check
(which page, which width, which check) and reports them all at the end of the test.
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


def require(required: Path, hint: str = "") -> None:
    """Skip the test (fail it on CI) when ``required`` (e.g. the built site's ``index.html``)
    does not exist; ``hint`` says how to make it."""
    if not required.exists():
        skip_or_fail(f"{required} is missing{': ' + hint if hint else ''}")


@contextlib.contextmanager
def chromium(required: Path | None = None, hint: str = "") -> Iterator[object]:
    """A launched headless Chromium (a playwright ``Browser``), closed on exit.

    Skips (fails on CI) when Chromium is missing, or when ``required`` (e.g. the built site's
    ``index.html``) does not exist; ``hint`` says how to make it.
    """
    if not CHROMIUM.exists():
        skip_or_fail(f"{CHROMIUM} is missing (apt-get install chromium)")
    if required is not None:
        require(required, hint)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def chromium_session():
    """One headless Chromium for every browser test of this pytest process (each xdist worker
    launches its own): launching it per module or per test cost seconds each time."""
    with chromium() as browser:
        yield browser


class Problems:
    """The failures of several checks on one opened page, reported together.

    ``with problems.check("name"):`` runs one check (a former test's body: its first failing
    assertion ends that check, as it ended the test); a failure is recorded as
    ``"<where>, <name>: <message>"`` and the next check still runs on the same page.
    ``report()`` fails the test with every recorded failure.
    """

    def __init__(self, where: str):
        self.where = where
        self.failures: list[str] = []

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # an assertion, or a playwright timeout or error (a skip or
            # a pytest.fail is a BaseException, and passes through)
            kind = "" if isinstance(exc, AssertionError) else f"{type(exc).__name__}: "
            self.failures.append(f"{self.where}, {name}: {kind}{exc}")

    def report(self) -> None:
        if self.failures:
            pytest.fail(f"{len(self.failures)} check(s) failed:\n\n"
                        + "\n\n".join(self.failures), pytrace=False)


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
