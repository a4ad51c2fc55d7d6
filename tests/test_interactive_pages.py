"""The interactive figures and the diagrams on the built chapter pages, in headless Chromium,
offline.

Run by ``make site-test`` after ``make book``. Each page whose notebook stores an interactive
figure (``attention_src.interactive``) is opened from disk at phone width (390 x 844) with
every non-file request blocked. The page must load the site's one copy of the renderer
(``_static/interactive.js``, the package's ``RENDERER_JS``) and no inline copy; each figure must
be drawn, carry the JSON its notebook cell stored, and respond to clicks, hovers, keys and
sliders with exactly the numbers the notebook computed (the checks of
``tests/interactive_checks.py``); the page must log no console error and stay 390 px wide. A
screenshot of each figure as drawn on its page is kept in ``_build/screenshots/interactive/``.

Each diagram (``attention_src.diagrams``, stored as ``image/svg+xml``) must appear on its page
as an SVG image with the diagram's own alt text ("Diagram: ..."), loaded, and no wider than the
phone's column; a screenshot of each is kept in ``_build/screenshots/diagrams/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attention_src.interactive import RENDERER_JS
from tests import interactive_checks as C
from tests.browser import Problems, open_offline, require
from tests.toc import ROOT, toc_entries

pytestmark = pytest.mark.browser

SITE = ROOT / "_build" / "html"
KEEP = ROOT / "_build" / "screenshots" / "interactive"
KEEP_DIAGRAMS = ROOT / "_build" / "screenshots" / "diagrams"
PHONE = {"width": 390, "height": 844}
FIGURE = re.compile(r'<div data-interactive="(\w+)".*?<script type="application/json">(.*?)'
                    r"</script>", re.DOTALL)


def stored_figures(notebook: Path) -> list[tuple[str, dict]]:
    """(name, payload) of each interactive figure ``notebook`` stores, in page order."""
    figures = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            html = out.get("data", {}).get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            figures += [(name, json.loads(data)) for name, data in FIGURE.findall(html)]
    return figures


def stored_diagrams(notebook: Path) -> list[str]:
    """The alt text of each diagram ``notebook`` stores, in page order."""
    alts = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            if "image/svg+xml" in out.get("data", {}):
                alts.append(cell["metadata"]["mystnb"]["image"]["alt"])
    return alts


NOTEBOOKS = [e for e in toc_entries() if e.suffix == ".ipynb"]
WITH_DIAGRAMS = {nb: alts for nb in NOTEBOOKS if (alts := stored_diagrams(nb))}
WITH_FIGURES = {nb: stored_figures(nb) for nb in NOTEBOOKS}
WITH_FIGURES = {nb: figs for nb, figs in WITH_FIGURES.items() if figs}


def _html(nb: Path) -> Path:
    return SITE / nb.relative_to(ROOT).with_suffix(".html")


@pytest.fixture(scope="module")
def browser(chromium_session):
    require(SITE / "index.html", "run make book")
    return chromium_session


def _check_figures(page, notebook, errors, blocked):
    """Each interactive figure is drawn by the site's one renderer, carries the JSON its
    notebook cell stored, and responds with the numbers the notebook computed; a screenshot of
    each is kept; the page stays 390 px wide, fetched nothing and logged no console error."""
    expected = WITH_FIGURES[notebook]
    assert page.locator("script[src*='_static/interactive.js']").count() == 1
    assert page.locator("script[data-interactive-renderer]").count() == 0, (
        "the inline renderer was not removed from the built page")
    boxes = page.locator("div[data-interactive]")
    assert boxes.count() == len(expected)
    KEEP.mkdir(parents=True, exist_ok=True)
    for i, (name, payload) in enumerate(expected):
        box = boxes.nth(i)
        assert box.get_attribute("data-interactive") == name
        C.check_rendered(box)
        assert C.payload_of(box) == payload
        box.scroll_into_view_if_needed()
        C.CHECKS[name](page, box, payload)
        shot = KEEP / f"{notebook.stem}_{i}_{name}.png"
        box.screenshot(path=str(shot))
        assert shot.stat().st_size > 2_000, f"{shot} looks empty"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert not blocked, f"requests that would leave the machine: {blocked}"
    assert not errors, f"console errors: {errors}"


def _check_diagrams(page, notebook, errors, blocked, exclude=slice(0, 0)):
    """Each diagram is an SVG image with its own alt text, loaded, no wider than the phone's
    column; a screenshot of each is kept; nothing fetched, no console error (but those of
    ``errors[exclude]``, logged by the figure checks before it)."""
    expected = WITH_DIAGRAMS[notebook]
    images = page.locator("article img[alt^='Diagram:']")
    assert images.count() == len(expected)
    KEEP_DIAGRAMS.mkdir(parents=True, exist_ok=True)
    for i, alt in enumerate(expected):
        image = images.nth(i)
        assert image.get_attribute("alt") == alt
        assert image.get_attribute("src").endswith(".svg")
        image.scroll_into_view_if_needed()
        natural, shown = image.evaluate("i => [i.naturalWidth, i.clientWidth]")
        assert natural > 0, f"diagram {i} did not load"
        assert 0 < shown <= PHONE["width"]
        shot = KEEP_DIAGRAMS / f"{notebook.stem}_{i}.png"
        image.screenshot(path=str(shot))
        assert shot.stat().st_size > 2_000, f"{shot} looks empty"
    errors = errors[:exclude.start] + errors[exclude.stop:]
    assert not blocked and not errors, (blocked, errors)


@pytest.mark.parametrize("notebook", sorted(set(WITH_FIGURES) | set(WITH_DIAGRAMS)),
                         ids=lambda p: p.stem)
def test_each_figure_and_diagram_on_its_page(browser, notebook):
    """The page of each notebook that stores interactive figures or diagrams, opened once at
    390 px offline: ``_check_figures`` (where it has figures), then ``_check_diagrams`` (where
    it has diagrams); every failure is reported, naming the page and the check."""
    errors: list[str] = []
    page, blocked = open_offline(browser, _html(notebook).as_uri(), errors, viewport=PHONE)
    problems = Problems(f"{_html(notebook).relative_to(SITE)} at {PHONE['width']} px")
    try:
        before = len(errors)
        if notebook in WITH_FIGURES:
            with problems.check("interactive figures show what the notebook computed"):
                _check_figures(page, notebook, errors, blocked)
        during = len(errors)
        if notebook in WITH_DIAGRAMS:
            # the diagram check judges what it judged on a page of its own: the console errors
            # of the page's load and of its own scrolling (those of the figure checks' presses
            # failed the figure check above)
            with problems.check("diagrams are SVG images with their alt text"):
                _check_diagrams(page, notebook, errors, blocked, exclude=slice(before, during))
    finally:
        page.close()
    problems.report()


def test_the_site_serves_the_packages_renderer_only_where_a_figure_is():
    script = SITE / "_static" / "interactive.js"
    if not script.exists():
        pytest.skip("no built site: run make book")
    assert script.read_text(encoding="utf-8") == RENDERER_JS
    with_figures = {_html(nb) for nb in WITH_FIGURES}
    for html in SITE.rglob("*.html"):
        if "_static" in html.relative_to(SITE).parts:
            continue
        text = html.read_text(encoding="utf-8")
        assert "data-interactive-renderer" not in text, f"{html}: an inline renderer"
        loads = "_static/interactive.js" in text
        assert loads == (html in with_figures), (
            f"{html.relative_to(SITE)} {'loads' if loads else 'does not load'} the renderer")


